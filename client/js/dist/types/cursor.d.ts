/**
 * newer reports whether cursor a is strictly ahead of cursor b (the stored
 * one): "" is no cursor; an unparsable cursor or another epoch means the
 * server's word wins; else positions compare, then a change cursor beats a
 * snapshot cursor at its position, and snapshot cursors compare by their
 * number (the server numbers a snapshot's cursors in the order it hands
 * them out).
 */
export declare function newer(a: string, b: string): boolean;

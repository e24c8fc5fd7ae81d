// Package tidejs embeds tide's compiled browser client (dist/tide.js, built
// from the modules in src/; see docs/client-js.md) so the middleware can serve it at
// <prefix>/client.js without a bundler in the app.
package tidejs

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// Module is the compiled ES module.
//
//go:embed dist/tide.js
var Module []byte

// Hash is the hex SHA-256 of Module, the first 16 digits: the module's
// ETag and the ?v= value of a cache-busting URL.
var Hash = func() string {
	h := sha256.Sum256(Module)
	return hex.EncodeToString(h[:8])
}()

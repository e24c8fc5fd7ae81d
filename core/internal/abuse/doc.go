// Package abuse holds the abuse suite: tests that flood a tide server on
// Postgres the way one hostile user could (many connections queueing large
// mutations, many presence connections to one topic, subscription churn
// on a presence topic, oversized frames) and fail if the server's heap
// grows past a documented bound or if another user's subscription, topic
// join or mutation is refused or not served meanwhile. The package has no
// code of its own; see abuse_test.go.
package abuse

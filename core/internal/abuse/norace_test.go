//go:build !race

package abuse_test

// raceEnabled: see race_test.go.
const raceEnabled = false

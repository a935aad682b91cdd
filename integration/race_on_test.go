//go:build race

package integration

// raceDetector: the tests (and the campaigns' child processes, which are
// this binary) run under the race detector, several times slower.
const raceDetector = true

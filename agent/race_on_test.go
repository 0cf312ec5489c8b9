//go:build race

package agent

// raceDetector is true when the tests run with -race.
const raceDetector = true

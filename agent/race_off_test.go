//go:build !race

package agent

const raceDetector = false

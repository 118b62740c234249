//go:build race

package locktest

// raceEnabled halves the seeds under the race detector, which runs the
// simulator about seven times slower.
const raceEnabled = true

//go:build race

package repl

// raceEnabled cuts the simulator's seeds under the race detector, which runs
// it several times slower.
const raceEnabled = true

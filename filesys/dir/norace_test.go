//go:build !race

package dir

const raceEnabled = false

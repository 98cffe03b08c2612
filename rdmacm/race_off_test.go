//go:build !race

package rdmacm_test

const raceEnabled = false

//go:build !race

package sa_test

const raceEnabledSA = false

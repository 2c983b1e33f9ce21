//go:build !race

package caddyportcullis_test

const raceEnabled = false

//go:build !cgo

package cmalloc

const cgoEnabled = false

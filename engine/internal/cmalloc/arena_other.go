//go:build !cgo || !linux

package cmalloc

func setArenaMax(int) bool { return false }

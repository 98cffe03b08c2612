//go:build !amd64

package wire

func updateVCRCFast(crc uint16, p []byte) uint16 { return updateVCRCTable(crc, p) }

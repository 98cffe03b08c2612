//go:build !amd64

package wire

func updateVCRCFast(crc uint16, p []byte) uint16 { return updateVCRCTable(crc, p) }

const icrcFold512 = false

func crcUpdFold(crc uint32, p []byte) uint32 { return crcSmall(crc, p) }

func crcHead(h []byte) uint32 { return crcSmall(0, h) }

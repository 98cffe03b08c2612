package wire

import "encoding/binary"

// AETH is the ACK Extended Transport Header (IBA 9.3.5), 4 bytes:
// Syndrome(8) MSN(24).
type AETH []byte

// Syndrome returns the syndrome byte (IBA 9.3.5).
func (h AETH) Syndrome() uint8 { return h[0] }

// MSN returns the 24-bit message sequence number (IBA 9.3.5).
func (h AETH) MSN() uint32 { return binary.BigEndian.Uint32(h) & 0x00ffffff }

// SetSyndrome sets the syndrome byte.
func (h AETH) SetSyndrome(v uint8) { h[0] = v }

// SetMSN sets the message sequence number.
func (h AETH) SetMSN(v uint32) {
	binary.BigEndian.PutUint32(h, uint32(h[0])<<24|v&0x00ffffff)
}

// AETH syndrome layout (IBA 9.3.5, encoding table; 9.7.5.2 for when each is
// sent): bit 7 reserved, bits 6-5 the kind (00 ACK, 01 RNR NAK, 10
// reserved, 11 NAK), bits 4-0 a value whose meaning depends on the kind.
const (
	SyndromeKindMask = 0x60
	SyndromeValMask  = 0x1f

	SyndromeACK    = 0x00 // ACK; value is the credit count code (IBA 9.7.7.2)
	SyndromeRNRNAK = 0x20 // RNR NAK; value is the RNR timer code
	SyndromeNAK    = 0x60 // NAK; value is the NAK code

	// CreditInvalid (11111b) in an ACK means "invalid credit count": the
	// responder does not advertise end-to-end credits (e.g. SRQ).
	CreditInvalid = 0x1f
)

// NAK codes, the low 5 bits of a NAK syndrome (IBA 9.3.5, 9.7.5.2).
const (
	NAKPSNSequenceError  = 0
	NAKInvalidRequest    = 1
	NAKRemoteAccessError = 2
	NAKRemoteOpError     = 3
	NAKInvalidRDRequest  = 4
)

// SyndromeACKCredit returns the syndrome of an ACK carrying a credit count
// code (0-30, or CreditInvalid).
func SyndromeACKCredit(credit uint8) uint8 { return SyndromeACK | credit&SyndromeValMask }

// SyndromeRNR returns the syndrome of an RNR NAK with the given 5-bit RNR
// timer code (the encoded minimum RNR NAK timer, IBA 9.7.5.2.8).
func SyndromeRNR(timer uint8) uint8 { return SyndromeRNRNAK | timer&SyndromeValMask }

// SyndromeNAKCode returns the syndrome of a NAK with the given code.
func SyndromeNAKCode(code uint8) uint8 { return SyndromeNAK | code&SyndromeValMask }

// IsACK reports whether the syndrome is an ACK.
func (h AETH) IsACK() bool { return h[0]&SyndromeKindMask == SyndromeACK }

// IsRNRNAK reports whether the syndrome is an RNR NAK.
func (h AETH) IsRNRNAK() bool { return h[0]&SyndromeKindMask == SyndromeRNRNAK }

// IsNAK reports whether the syndrome is a NAK (not RNR).
func (h AETH) IsNAK() bool { return h[0]&SyndromeKindMask == SyndromeNAK }

// Credit returns the credit count code of an ACK.
func (h AETH) Credit() uint8 { return h[0] & SyndromeValMask }

// RNRTimer returns the RNR timer code of an RNR NAK.
func (h AETH) RNRTimer() uint8 { return h[0] & SyndromeValMask }

// NAKCode returns the NAK code of a NAK.
func (h AETH) NAKCode() uint8 { return h[0] & SyndromeValMask }

// SetACK writes an ACK syndrome with a credit count code and the MSN.
func (h AETH) SetACK(credit uint8, msn uint32) {
	h.SetSyndrome(SyndromeACKCredit(credit))
	h.SetMSN(msn)
}

// SetRNRNAK writes an RNR NAK syndrome with a timer code and the MSN.
func (h AETH) SetRNRNAK(timer uint8, msn uint32) {
	h.SetSyndrome(SyndromeRNR(timer))
	h.SetMSN(msn)
}

// SetNAK writes a NAK syndrome with a NAK code and the MSN.
func (h AETH) SetNAK(code uint8, msn uint32) {
	h.SetSyndrome(SyndromeNAKCode(code))
	h.SetMSN(msn)
}

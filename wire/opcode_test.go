package wire

import "testing"

// opcodeSpec is IBA table 38 with the ETHs each opcode carries, written out
// independently of the table built in opcode.go.
var opcodeSpec = map[Opcode]struct {
	name    string
	headers HeaderSet
	payload bool
	pos     byte // 'F' first, 'M' middle, 'L' last, 'O' only
}{
	RCSendFirst:              {"RCSendFirst", 0, true, 'F'},
	RCSendMiddle:             {"RCSendMiddle", 0, true, 'M'},
	RCSendLast:               {"RCSendLast", 0, true, 'L'},
	RCSendLastImm:            {"RCSendLastImm", HasImmDt, true, 'L'},
	RCSendOnly:               {"RCSendOnly", 0, true, 'O'},
	RCSendOnlyImm:            {"RCSendOnlyImm", HasImmDt, true, 'O'},
	RCRDMAWriteFirst:         {"RCRDMAWriteFirst", HasRETH, true, 'F'},
	RCRDMAWriteMiddle:        {"RCRDMAWriteMiddle", 0, true, 'M'},
	RCRDMAWriteLast:          {"RCRDMAWriteLast", 0, true, 'L'},
	RCRDMAWriteLastImm:       {"RCRDMAWriteLastImm", HasImmDt, true, 'L'},
	RCRDMAWriteOnly:          {"RCRDMAWriteOnly", HasRETH, true, 'O'},
	RCRDMAWriteOnlyImm:       {"RCRDMAWriteOnlyImm", HasRETH | HasImmDt, true, 'O'},
	RCRDMAReadRequest:        {"RCRDMAReadRequest", HasRETH, false, 'O'},
	RCRDMAReadResponseFirst:  {"RCRDMAReadResponseFirst", HasAETH, true, 'F'},
	RCRDMAReadResponseMiddle: {"RCRDMAReadResponseMiddle", 0, true, 'M'},
	RCRDMAReadResponseLast:   {"RCRDMAReadResponseLast", HasAETH, true, 'L'},
	RCRDMAReadResponseOnly:   {"RCRDMAReadResponseOnly", HasAETH, true, 'O'},
	RCAcknowledge:            {"RCAcknowledge", HasAETH, false, 'O'},
	RCAtomicAcknowledge:      {"RCAtomicAcknowledge", HasAETH | HasAtomicAckETH, false, 'O'},
	RCCompareSwap:            {"RCCompareSwap", HasAtomicETH, false, 'O'},
	RCFetchAdd:               {"RCFetchAdd", HasAtomicETH, false, 'O'},
	RCSendLastInv:            {"RCSendLastInv", HasIETH, true, 'L'},
	RCSendOnlyInv:            {"RCSendOnlyInv", HasIETH, true, 'O'},

	UCSendFirst:        {"UCSendFirst", 0, true, 'F'},
	UCSendMiddle:       {"UCSendMiddle", 0, true, 'M'},
	UCSendLast:         {"UCSendLast", 0, true, 'L'},
	UCSendLastImm:      {"UCSendLastImm", HasImmDt, true, 'L'},
	UCSendOnly:         {"UCSendOnly", 0, true, 'O'},
	UCSendOnlyImm:      {"UCSendOnlyImm", HasImmDt, true, 'O'},
	UCRDMAWriteFirst:   {"UCRDMAWriteFirst", HasRETH, true, 'F'},
	UCRDMAWriteMiddle:  {"UCRDMAWriteMiddle", 0, true, 'M'},
	UCRDMAWriteLast:    {"UCRDMAWriteLast", 0, true, 'L'},
	UCRDMAWriteLastImm: {"UCRDMAWriteLastImm", HasImmDt, true, 'L'},
	UCRDMAWriteOnly:    {"UCRDMAWriteOnly", HasRETH, true, 'O'},
	UCRDMAWriteOnlyImm: {"UCRDMAWriteOnlyImm", HasRETH | HasImmDt, true, 'O'},

	RDSendFirst:              {"RDSendFirst", HasRDETH | HasDETH, true, 'F'},
	RDSendMiddle:             {"RDSendMiddle", HasRDETH | HasDETH, true, 'M'},
	RDSendLast:               {"RDSendLast", HasRDETH | HasDETH, true, 'L'},
	RDSendLastImm:            {"RDSendLastImm", HasRDETH | HasDETH | HasImmDt, true, 'L'},
	RDSendOnly:               {"RDSendOnly", HasRDETH | HasDETH, true, 'O'},
	RDSendOnlyImm:            {"RDSendOnlyImm", HasRDETH | HasDETH | HasImmDt, true, 'O'},
	RDRDMAWriteFirst:         {"RDRDMAWriteFirst", HasRDETH | HasDETH | HasRETH, true, 'F'},
	RDRDMAWriteMiddle:        {"RDRDMAWriteMiddle", HasRDETH | HasDETH, true, 'M'},
	RDRDMAWriteLast:          {"RDRDMAWriteLast", HasRDETH | HasDETH, true, 'L'},
	RDRDMAWriteLastImm:       {"RDRDMAWriteLastImm", HasRDETH | HasDETH | HasImmDt, true, 'L'},
	RDRDMAWriteOnly:          {"RDRDMAWriteOnly", HasRDETH | HasDETH | HasRETH, true, 'O'},
	RDRDMAWriteOnlyImm:       {"RDRDMAWriteOnlyImm", HasRDETH | HasDETH | HasRETH | HasImmDt, true, 'O'},
	RDRDMAReadRequest:        {"RDRDMAReadRequest", HasRDETH | HasDETH | HasRETH, false, 'O'},
	RDRDMAReadResponseFirst:  {"RDRDMAReadResponseFirst", HasRDETH | HasAETH, true, 'F'},
	RDRDMAReadResponseMiddle: {"RDRDMAReadResponseMiddle", HasRDETH, true, 'M'},
	RDRDMAReadResponseLast:   {"RDRDMAReadResponseLast", HasRDETH | HasAETH, true, 'L'},
	RDRDMAReadResponseOnly:   {"RDRDMAReadResponseOnly", HasRDETH | HasAETH, true, 'O'},
	RDAcknowledge:            {"RDAcknowledge", HasRDETH | HasAETH, false, 'O'},
	RDAtomicAcknowledge:      {"RDAtomicAcknowledge", HasRDETH | HasAETH | HasAtomicAckETH, false, 'O'},
	RDCompareSwap:            {"RDCompareSwap", HasRDETH | HasDETH | HasAtomicETH, false, 'O'},
	RDFetchAdd:               {"RDFetchAdd", HasRDETH | HasDETH | HasAtomicETH, false, 'O'},
	RDResync:                 {"RDResync", HasRDETH | HasDETH, false, 'O'},

	UDSendOnly:    {"UDSendOnly", HasDETH, true, 'O'},
	UDSendOnlyImm: {"UDSendOnlyImm", HasDETH | HasImmDt, true, 'O'},

	// XRC (Annex A14): requests carry an XRCETH, responses do not.
	0xA0: {"XRCSendFirst", HasXRCETH, true, 'F'},
	0xA1: {"XRCSendMiddle", HasXRCETH, true, 'M'},
	0xA2: {"XRCSendLast", HasXRCETH, true, 'L'},
	0xA3: {"XRCSendLastImm", HasXRCETH | HasImmDt, true, 'L'},
	0xA4: {"XRCSendOnly", HasXRCETH, true, 'O'},
	0xA5: {"XRCSendOnlyImm", HasXRCETH | HasImmDt, true, 'O'},
	0xA6: {"XRCRDMAWriteFirst", HasXRCETH | HasRETH, true, 'F'},
	0xA7: {"XRCRDMAWriteMiddle", HasXRCETH, true, 'M'},
	0xA8: {"XRCRDMAWriteLast", HasXRCETH, true, 'L'},
	0xA9: {"XRCRDMAWriteLastImm", HasXRCETH | HasImmDt, true, 'L'},
	0xAA: {"XRCRDMAWriteOnly", HasXRCETH | HasRETH, true, 'O'},
	0xAB: {"XRCRDMAWriteOnlyImm", HasXRCETH | HasRETH | HasImmDt, true, 'O'},
	0xAC: {"XRCRDMAReadRequest", HasXRCETH | HasRETH, false, 'O'},
	0xAD: {"XRCRDMAReadResponseFirst", HasAETH, true, 'F'},
	0xAE: {"XRCRDMAReadResponseMiddle", 0, true, 'M'},
	0xAF: {"XRCRDMAReadResponseLast", HasAETH, true, 'L'},
	0xB0: {"XRCRDMAReadResponseOnly", HasAETH, true, 'O'},
	0xB1: {"XRCAcknowledge", HasAETH, false, 'O'},
	0xB2: {"XRCAtomicAcknowledge", HasAETH | HasAtomicAckETH, false, 'O'},
	0xB3: {"XRCCompareSwap", HasXRCETH | HasAtomicETH, false, 'O'},
	0xB4: {"XRCFetchAdd", HasXRCETH | HasAtomicETH, false, 'O'},
	0xB6: {"XRCSendLastInv", HasXRCETH | HasIETH, true, 'L'},
	0xB7: {"XRCSendOnlyInv", HasXRCETH | HasIETH, true, 'O'},
}

func TestOpcodes(t *testing.T) {
	valid := 0
	for i := range 256 {
		op := Opcode(i)
		s, ok := opcodeSpec[op]
		if op.Valid() != ok {
			t.Errorf("%#02x: Valid=%v want %v", i, op.Valid(), ok)
			continue
		}
		if !ok {
			if op.Headers() != 0 || op.HeaderLen() != 0 || op.HasPayload() || op.IsFirst() || op.IsMiddle() || op.IsLast() || op.IsOnly() {
				t.Errorf("%#02x: invalid opcode has properties", i)
			}
			if len(op.String()) != len("Opcode(0x00)") {
				t.Errorf("%#02x: String %q", i, op.String())
			}
			continue
		}
		valid++
		if op.String() != s.name {
			t.Errorf("%#02x: String %q want %q", i, op.String(), s.name)
		}
		if op.Headers() != s.headers || op.HeaderLen() != s.headers.Len() {
			t.Errorf("%v: headers %#x/%d want %#x/%d", op, op.Headers(), op.HeaderLen(), s.headers, s.headers.Len())
		}
		if op.HasPayload() != s.payload {
			t.Errorf("%v: HasPayload %v", op, op.HasPayload())
		}
		pos := [4]bool{op.IsFirst(), op.IsMiddle(), op.IsLast(), op.IsOnly()}
		want := [4]bool{s.pos == 'F', s.pos == 'M', s.pos == 'L', s.pos == 'O'}
		if pos != want {
			t.Errorf("%v: position %v want %c", op, pos, s.pos)
		}
		wantT := map[byte]Transport{0: TransportRC, 1: TransportUC, 2: TransportRD, 3: TransportUD, 5: TransportXRC}[byte(i>>5)]
		if op.Transport() != wantT {
			t.Errorf("%v: transport %v", op, op.Transport())
		}
	}
	if valid != len(opcodeSpec) {
		t.Errorf("%d valid opcodes, spec lists %d", valid, len(opcodeSpec))
	}
	for i, want := range []string{"RC", "UC", "RD", "UD", "CNP", "XRC", "Mfr", "Mfr"} {
		if got := Opcode(i << 5).Transport().String(); got != want {
			t.Errorf("transport %d: %s want %s", i, got, want)
		}
	}
	if !HeaderSet(HasRDETH|HasDETH).Has(HasDETH) || HeaderSet(HasDETH).Has(HasRDETH|HasDETH) {
		t.Error("HeaderSet.Has")
	}
	if all := HeaderSet(0xff).Len(); all != RDETHLen+DETHLen+RETHLen+AtomicETHLen+AETHLen+AtomicAckETHLen+ImmDtLen+IETHLen {
		t.Errorf("HeaderSet.Len all = %d", all)
	}
}

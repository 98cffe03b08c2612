package hca

// The QP state machine (IBA 10.3.1, Table "QP state transition properties"; the same
// table as the kernel's ib_modify_qp_is_ok): for each transition and QP type, the
// attributes that must be given and those that may be.

type transMasks struct{ req, opt QPAttrMask }

type transKey struct {
	from, to QPState
	typ      QPType
}

var qpTransitions = map[transKey]transMasks{}

func addTrans(from, to QPState, m map[QPType]transMasks) {
	for t, tm := range m {
		qpTransitions[transKey{from, to, t}] = tm
	}
}

func init() {
	const (
		ud  = QPTypeUD
		rc  = QPTypeRC
		xi  = QPTypeXRCSend // XRC_INI
		xt  = QPTypeXRCRecv // XRC_TGT
		uc  = QPTypeUC
		smi = QPTypeSMI
		gsi = QPTypeGSI
	)
	// RESET → INIT
	addTrans(QPStateReset, QPStateInit, map[QPType]transMasks{
		ud:  {req: QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
		uc:  {req: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		rc:  {req: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		xi:  {req: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		xt:  {req: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		smi: {req: QPAttrQKey},
		gsi: {req: QPAttrPKeyIndex | QPAttrQKey},
	})
	// INIT → INIT
	addTrans(QPStateInit, QPStateInit, map[QPType]transMasks{
		ud:  {opt: QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
		uc:  {opt: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		rc:  {opt: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		xi:  {opt: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		xt:  {opt: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		smi: {opt: QPAttrQKey},
		gsi: {opt: QPAttrPKeyIndex | QPAttrQKey},
	})
	// INIT → RTR
	addTrans(QPStateInit, QPStateRTR, map[QPType]transMasks{
		ud:  {opt: QPAttrPKeyIndex | QPAttrQKey},
		uc:  {req: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN, opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
		rc:  {req: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer, opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
		xi:  {req: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN, opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
		xt:  {req: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer, opt: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex},
		smi: {opt: QPAttrQKey},
		gsi: {opt: QPAttrPKeyIndex | QPAttrQKey},
	})
	// RTR → RTS
	addTrans(QPStateRTR, QPStateRTS, map[QPType]transMasks{
		ud:  {req: QPAttrSQPSN, opt: QPAttrCurState | QPAttrQKey},
		uc:  {req: QPAttrSQPSN, opt: QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState},
		rc:  {req: QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic, opt: QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState},
		xi:  {req: QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic, opt: QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState},
		xt:  {req: QPAttrSQPSN | QPAttrTimeout, opt: QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState},
		smi: {req: QPAttrSQPSN, opt: QPAttrCurState | QPAttrQKey},
		gsi: {req: QPAttrSQPSN, opt: QPAttrCurState | QPAttrQKey},
	})
	// RTS → RTS, SQD → RTS, SQE → RTS (UD/UC only for SQE)
	rtsOpt := map[QPType]transMasks{
		ud:  {opt: QPAttrCurState | QPAttrQKey},
		uc:  {opt: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState},
		rc:  {opt: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState | QPAttrMinRNRTimer},
		xi:  {opt: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState},
		xt:  {opt: QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState | QPAttrMinRNRTimer},
		smi: {opt: QPAttrCurState | QPAttrQKey},
		gsi: {opt: QPAttrCurState | QPAttrQKey},
	}
	addTrans(QPStateRTS, QPStateRTS, rtsOpt)
	addTrans(QPStateSQD, QPStateRTS, rtsOpt)
	addTrans(QPStateSQE, QPStateRTS, map[QPType]transMasks{
		ud:  {opt: QPAttrCurState | QPAttrQKey},
		uc:  {opt: QPAttrCurState | QPAttrAccessFlags},
		smi: {opt: QPAttrCurState | QPAttrQKey},
		gsi: {opt: QPAttrCurState | QPAttrQKey},
	})
	// RTS → SQD
	addTrans(QPStateRTS, QPStateSQD, map[QPType]transMasks{
		ud: {opt: QPAttrEnSQDAsyncNotify}, uc: {opt: QPAttrEnSQDAsyncNotify}, rc: {opt: QPAttrEnSQDAsyncNotify},
		xi: {opt: QPAttrEnSQDAsyncNotify}, xt: {opt: QPAttrEnSQDAsyncNotify},
		smi: {opt: QPAttrEnSQDAsyncNotify}, gsi: {opt: QPAttrEnSQDAsyncNotify},
	})
	// SQD → SQD
	addTrans(QPStateSQD, QPStateSQD, map[QPType]transMasks{
		ud:  {opt: QPAttrPKeyIndex | QPAttrQKey},
		uc:  {opt: QPAttrAV | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState},
		rc:  {opt: QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState},
		smi: {opt: QPAttrPKeyIndex | QPAttrQKey},
		gsi: {opt: QPAttrPKeyIndex | QPAttrQKey},
	})
}

// checkTransition validates a ModifyQP call's target state and mask (IBA 10.3,
// ibv_modify_qp(3)): a transition not in the table, a missing required attribute or an
// attribute not allowed for the transition fails with EINVAL and leaves the QP unchanged.
func checkTransition(typ QPType, cur, next QPState, mask QPAttrMask) error {
	mask &^= QPAttrState
	if next == QPStateReset || next == QPStateErr {
		// Any state may go to RESET or ERR; no other attribute is taken.
		if mask&^QPAttrCurState != 0 {
			return errorf("modify_qp", EINVAL, "%s→%s takes no attributes but %s", cur, next, mask&^QPAttrCurState)
		}
		return nil
	}
	tm, ok := qpTransitions[transKey{cur, next, typ}]
	if !ok {
		return errorf("modify_qp", EINVAL, "%s QP cannot go from %s to %s", typ, cur, next)
	}
	if miss := tm.req &^ mask; miss != 0 {
		return errorf("modify_qp", EINVAL, "%s QP %s→%s is missing required attribute %s", typ, cur, next, miss)
	}
	if extra := mask &^ (tm.req | tm.opt); extra != 0 {
		return errorf("modify_qp", EINVAL, "%s QP %s→%s does not take attribute %s", typ, cur, next, extra)
	}
	return nil
}

// Package lockpb is the lock service's wire format (lock.proto) and its
// codec: conversions between the lock package's messages and protobuf
// frames. Decoders take bytes that came from the network: they return an
// error for anything the lock package could not accept and never panic.
// Encoders take messages the lock package made; handing them anything else
// is a bug and panics.
package lockpb

import (
	"errors"
	"fmt"

	"github.com/plumeria-fs/plumeria/lock"
)

// Limits of a decoded frame, on top of the lock package's own.
const (
	// FrameMessagesMax bounds the messages in one frame. Writers split
	// larger batches.
	FrameMessagesMax = 4096
	// FenceTablesMax bounds FenceDone.Tables: the tables of all the fenced
	// sessions of one clerk, which one server tracks at most TablesMax of.
	FenceTablesMax = lock.TablesMax
	// RegistryMax bounds AssignGroups.Sessions and AssignGroups.Fences.
	RegistryMax = lock.ClerksMax
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("lockpb: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// ---------- clerk → server ----------

// EncodeClerk returns the frame that carries msgs of the clerk session
// (id, session). Every message must be a clerk-to-server message of that
// session.
func EncodeClerk(id string, session uint64, msgs []lock.Message) *ClerkFrame {
	f := &ClerkFrame{Clerk: id, Session: session, Msgs: make([]*ClerkMsg, 0, len(msgs))}
	for _, m := range msgs {
		if mid, msn := lock.ClerkOf(m); mid != id || msn != session {
			panic(fmt.Sprintf("lockpb: %T of %s/%d in a frame of %s/%d", m, mid, msn, id, session))
		}
		f.Msgs = append(f.Msgs, encodeClerkMsg(m))
	}
	return f
}

func encodeClerkMsg(m lock.Message) *ClerkMsg {
	switch m := m.(type) {
	case lock.OpenTable:
		return &ClerkMsg{Msg: &ClerkMsg_OpenTable{&OpenTable{Table: m.Table}}}
	case lock.CloseTable:
		return &ClerkMsg{Msg: &ClerkMsg_CloseTable{&CloseTable{Table: m.Table, RenewSeq: m.RenewSeq}}}
	case lock.Renew:
		return &ClerkMsg{Msg: &ClerkMsg_Renew{&Renew{Seq: m.Seq, Tables: m.Tables}}}
	case lock.Request:
		return &ClerkMsg{Msg: &ClerkMsg_Request{&Request{Table: m.Table, Lock: m.Lock,
			Mode: Mode(m.Mode), ReqId: m.ReqID}}}
	case lock.Release:
		return &ClerkMsg{Msg: &ClerkMsg_Release{&Release{Table: m.Table, Lock: m.Lock, ReqId: m.ReqID}}}
	case lock.Downgrade:
		return &ClerkMsg{Msg: &ClerkMsg_Downgrade{&Downgrade{Table: m.Table, Lock: m.Lock, ReqId: m.ReqID}}}
	case lock.Held:
		return &ClerkMsg{Msg: &ClerkMsg_Held{&Held{Table: m.Table, Epoch: m.Epoch,
			Groups: encodeGroups(m.Groups), Locks: encodeHeldLocks(m.Locks),
			Pending: encodeHeldLocks(m.Pending), Recovering: encodeDead(m.Recovering)}}}
	case lock.RecoveryDone:
		return &ClerkMsg{Msg: &ClerkMsg_RecoveryDone{&RecoveryDone{Table: m.Table, Dead: m.Dead,
			DeadSession: m.DeadSession}}}
	}
	panic(fmt.Sprintf("lockpb: %T is not a clerk-to-server message", m))
}

// DecodeClerk checks a frame from a clerk and returns its session and
// messages. Errors wrap ErrMalformed.
func DecodeClerk(f *ClerkFrame) (id string, session uint64, msgs []lock.Message, err error) {
	if f == nil {
		return "", 0, nil, malformed("nil frame")
	}
	id, session = f.GetClerk(), f.GetSession()
	if err := checkName("clerk id", id); err != nil {
		return "", 0, nil, err
	}
	if session == 0 {
		return "", 0, nil, malformed("clerk %q: session 0", id)
	}
	if len(f.GetMsgs()) > FrameMessagesMax {
		return "", 0, nil, malformed("%d messages in a frame, max %d", len(f.GetMsgs()), FrameMessagesMax)
	}
	if len(f.GetMsgs()) > 0 {
		msgs = make([]lock.Message, 0, len(f.GetMsgs()))
	}
	for i, pm := range f.GetMsgs() {
		m, err := decodeClerkMsg(id, session, pm)
		if err != nil {
			return "", 0, nil, fmt.Errorf("message %d: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return id, session, msgs, nil
}

func decodeClerkMsg(id string, sn uint64, pm *ClerkMsg) (lock.Message, error) {
	switch x := pm.GetMsg().(type) {
	case *ClerkMsg_OpenTable:
		return lock.OpenTable{Clerk: id, Session: sn, Table: x.OpenTable.GetTable()},
			checkName("table", x.OpenTable.GetTable())
	case *ClerkMsg_CloseTable:
		m := x.CloseTable
		return lock.CloseTable{Clerk: id, Session: sn, Table: m.GetTable(), RenewSeq: m.GetRenewSeq()},
			checkName("table", m.GetTable())
	case *ClerkMsg_Renew:
		return decodeRenew(id, sn, x.Renew)
	case *ClerkMsg_Request:
		m := x.Request
		mode, err := decodeMode(m.GetMode(), lock.Read, lock.Write)
		if err == nil {
			err = checkName("table", m.GetTable())
		}
		return lock.Request{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(),
			Mode: mode, ReqID: m.GetReqId()}, err
	case *ClerkMsg_Release:
		m := x.Release
		return lock.Release{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(),
			ReqID: m.GetReqId()}, checkName("table", m.GetTable())
	case *ClerkMsg_Downgrade:
		m := x.Downgrade
		return lock.Downgrade{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(),
			ReqID: m.GetReqId()}, checkName("table", m.GetTable())
	case *ClerkMsg_Held:
		return decodeHeld(id, sn, x.Held)
	case *ClerkMsg_RecoveryDone:
		m := x.RecoveryDone
		err := checkName("table", m.GetTable())
		if err == nil {
			err = checkName("dead clerk id", m.GetDead())
		}
		return lock.RecoveryDone{Clerk: id, Session: sn, Table: m.GetTable(), Dead: m.GetDead(),
			DeadSession: m.GetDeadSession()}, err
	}
	return nil, malformed("clerk message with no known type")
}

func decodeRenew(id string, sn uint64, m *Renew) (lock.Message, error) {
	if len(m.GetTables()) > lock.TablesPerClerkMax {
		return nil, malformed("renew lists %d tables, max %d", len(m.GetTables()), lock.TablesPerClerkMax)
	}
	tables, err := decodeNames("table", m.GetTables())
	return lock.Renew{Clerk: id, Session: sn, Seq: m.GetSeq(), Tables: tables}, err
}

func decodeHeld(id string, sn uint64, m *Held) (lock.Message, error) {
	switch {
	case len(m.GetGroups()) > lock.GroupsMax:
		return nil, malformed("held names %d groups, max %d", len(m.GetGroups()), lock.GroupsMax)
	case len(m.GetLocks()) > lock.LocksPerClerkMax:
		return nil, malformed("held lists %d locks, max %d", len(m.GetLocks()), lock.LocksPerClerkMax)
	case len(m.GetPending()) > lock.PendingRequestsMax:
		return nil, malformed("held lists %d pending, max %d", len(m.GetPending()), lock.PendingRequestsMax)
	case len(m.GetRecovering()) > lock.ClerksMax:
		return nil, malformed("held lists %d recoveries, max %d", len(m.GetRecovering()), lock.ClerksMax)
	}
	h := lock.Held{Clerk: id, Session: sn, Table: m.GetTable(), Epoch: m.GetEpoch()}
	var err error
	if err = checkName("table", h.Table); err != nil {
		return nil, err
	}
	if h.Groups, err = decodeGroups(m.GetGroups()); err != nil {
		return nil, err
	}
	if h.Locks, err = decodeHeldLocks(m.GetLocks()); err != nil {
		return nil, err
	}
	if h.Pending, err = decodeHeldLocks(m.GetPending()); err != nil {
		return nil, err
	}
	for _, d := range m.GetRecovering() {
		if err := checkName("dead clerk id", d.GetClerk()); err != nil {
			return nil, err
		}
		h.Recovering = append(h.Recovering, lock.DeadSession{Clerk: d.GetClerk(), Session: d.GetSession()})
	}
	return h, nil
}

// ---------- server → clerk ----------

// EncodeServer returns the frame that carries msgs to one clerk session.
// Every message must be a server-to-clerk message.
func EncodeServer(msgs []lock.Message) *ServerFrame {
	f := &ServerFrame{Msgs: make([]*ServerMsg, 0, len(msgs))}
	for _, m := range msgs {
		f.Msgs = append(f.Msgs, encodeServerMsg(m))
	}
	return f
}

func encodeServerMsg(m lock.Message) *ServerMsg {
	switch m := m.(type) {
	case lock.RenewAck:
		gs := make([]*GroupEpoch, len(m.Groups))
		for i, g := range m.Groups {
			gs[i] = &GroupEpoch{Group: encodeGroup(g.Group), Epoch: g.Epoch}
		}
		return &ServerMsg{Msg: &ServerMsg_RenewAck{&RenewAck{Seq: m.Seq, Groups: gs}}}
	case lock.Grant:
		return &ServerMsg{Msg: &ServerMsg_Grant{&Grant{Table: m.Table, Lock: m.Lock, Mode: Mode(m.Mode),
			ReqId: m.ReqID, Epoch: m.Epoch}}}
	case lock.Revoke:
		return &ServerMsg{Msg: &ServerMsg_Revoke{&Revoke{Table: m.Table, Lock: m.Lock, ReqId: m.ReqID,
			To: Mode(m.To), Epoch: m.Epoch}}}
	case lock.QueryHeld:
		return &ServerMsg{Msg: &ServerMsg_QueryHeld{&QueryHeld{Table: m.Table, Epoch: m.Epoch,
			Groups: encodeGroups(m.Groups)}}}
	case lock.Recover:
		return &ServerMsg{Msg: &ServerMsg_Recover{&Recover{Table: m.Table, Dead: m.Dead,
			DeadSession: m.DeadSession, Epoch: m.Epoch}}}
	case lock.Reject:
		return &ServerMsg{Msg: &ServerMsg_Reject{&Reject{Table: m.Table, Lock: m.Lock, ReqId: m.ReqID,
			Reason: Reason(m.Reason)}}}
	case lock.Expired:
		return &ServerMsg{Msg: &ServerMsg_Expired{&Expired{}}}
	}
	panic(fmt.Sprintf("lockpb: %T is not a server-to-clerk message", m))
}

// DecodeServer checks a frame from a lock server on the stream of clerk
// session (id, session) and returns its messages, addressed to that
// session. Errors wrap ErrMalformed.
func DecodeServer(f *ServerFrame, id string, session uint64) ([]lock.Message, error) {
	if f == nil {
		return nil, malformed("nil frame")
	}
	if len(f.GetMsgs()) > FrameMessagesMax {
		return nil, malformed("%d messages in a frame, max %d", len(f.GetMsgs()), FrameMessagesMax)
	}
	var msgs []lock.Message
	if len(f.GetMsgs()) > 0 {
		msgs = make([]lock.Message, 0, len(f.GetMsgs()))
	}
	for i, pm := range f.GetMsgs() {
		m, err := decodeServerMsg(id, session, pm)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func decodeServerMsg(id string, sn uint64, pm *ServerMsg) (lock.Message, error) {
	switch x := pm.GetMsg().(type) {
	case *ServerMsg_RenewAck:
		return decodeRenewAck(id, sn, x.RenewAck)
	case *ServerMsg_Grant:
		m := x.Grant
		mode, err := decodeMode(m.GetMode(), lock.Read, lock.Write)
		if err == nil {
			err = checkName("table", m.GetTable())
		}
		return lock.Grant{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(), Mode: mode,
			ReqID: m.GetReqId(), Epoch: m.GetEpoch()}, err
	case *ServerMsg_Revoke:
		m := x.Revoke
		to, err := decodeMode(m.GetTo(), lock.None, lock.Read)
		if err == nil {
			err = checkName("table", m.GetTable())
		}
		return lock.Revoke{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(),
			ReqID: m.GetReqId(), To: to, Epoch: m.GetEpoch()}, err
	case *ServerMsg_QueryHeld:
		m := x.QueryHeld
		if len(m.GetGroups()) > lock.GroupsMax {
			return nil, malformed("query names %d groups, max %d", len(m.GetGroups()), lock.GroupsMax)
		}
		gs, err := decodeGroups(m.GetGroups())
		if err == nil {
			err = checkName("table", m.GetTable())
		}
		return lock.QueryHeld{Clerk: id, Session: sn, Table: m.GetTable(), Epoch: m.GetEpoch(), Groups: gs}, err
	case *ServerMsg_Recover:
		m := x.Recover
		err := checkName("table", m.GetTable())
		if err == nil {
			err = checkName("dead clerk id", m.GetDead())
		}
		return lock.Recover{Clerk: id, Session: sn, Table: m.GetTable(), Dead: m.GetDead(),
			DeadSession: m.GetDeadSession(), Epoch: m.GetEpoch()}, err
	case *ServerMsg_Reject:
		return decodeReject(id, sn, x.Reject)
	case *ServerMsg_Expired:
		return lock.Expired{Clerk: id, Session: sn}, nil
	}
	return nil, malformed("server message with no known type")
}

func decodeRenewAck(id string, sn uint64, m *RenewAck) (lock.Message, error) {
	if len(m.GetGroups()) > lock.GroupsMax {
		return nil, malformed("renew ack names %d groups, max %d", len(m.GetGroups()), lock.GroupsMax)
	}
	a := lock.RenewAck{Clerk: id, Session: sn, Seq: m.GetSeq()}
	for _, ge := range m.GetGroups() {
		if ge.GetGroup() >= lock.GroupsMax {
			return nil, malformed("group %d, max %d", ge.GetGroup(), lock.GroupsMax-1)
		}
		a.Groups = append(a.Groups, lock.GroupEpoch{Group: int(ge.GetGroup()), Epoch: ge.GetEpoch()})
	}
	return a, nil
}

func decodeReject(id string, sn uint64, m *Reject) (lock.Message, error) {
	r := m.GetReason()
	if _, ok := Reason_name[int32(r)]; !ok {
		return nil, malformed("reject reason %d", r)
	}
	// A table name that broke the rules is what a Reject may be about
	// (ReasonBadName), so only its length is bounded.
	if len(m.GetTable()) > lock.NameBytesMax {
		return nil, malformed("table name of %d bytes, max %d", len(m.GetTable()), lock.NameBytesMax)
	}
	return lock.Reject{Clerk: id, Session: sn, Table: m.GetTable(), Lock: m.GetLock(), ReqID: m.GetReqId(),
		Reason: lock.Reason(r)}, nil
}

// ---------- coordinator → lock server ----------

// EncodeEvent returns the wire form of a coordinator event: AssignGroups,
// FenceDone or Recovered.
func EncodeEvent(m lock.Message) *CoordEvent {
	switch m := m.(type) {
	case lock.AssignGroups:
		a := &AssignGroups{Epoch: m.Epoch, Groups: encodeGroups(m.Groups)}
		for _, f := range m.Fences {
			a.Fences = append(a.Fences, &FenceDone{Clerk: f.Clerk, Session: f.Session, Tables: f.Tables})
		}
		for _, r := range m.Sessions {
			a.Sessions = append(a.Sessions, &Registered{Clerk: r.Clerk, Session: r.Session, Tables: r.Tables})
		}
		return &CoordEvent{Event: &CoordEvent_AssignGroups{a}}
	case lock.FenceDone:
		return &CoordEvent{Event: &CoordEvent_FenceDone{&FenceDone{Clerk: m.Clerk, Session: m.Session, Tables: m.Tables}}}
	case lock.Recovered:
		return &CoordEvent{Event: &CoordEvent_Recovered{&Recovered{Clerk: m.Clerk, Session: m.Session, Table: m.Table}}}
	}
	panic(fmt.Sprintf("lockpb: %T is not a coordinator event", m))
}

// DecodeEvent checks a coordinator event. Errors wrap ErrMalformed.
func DecodeEvent(e *CoordEvent) (lock.Message, error) {
	switch x := e.GetEvent().(type) {
	case *CoordEvent_AssignGroups:
		return decodeAssign(x.AssignGroups)
	case *CoordEvent_FenceDone:
		return decodeFence(x.FenceDone, FenceTablesMax)
	case *CoordEvent_Recovered:
		m := x.Recovered
		err := checkName("clerk id", m.GetClerk())
		if err == nil {
			err = checkName("table", m.GetTable())
		}
		if err != nil {
			return nil, err
		}
		return lock.Recovered{Clerk: m.GetClerk(), Session: m.GetSession(), Table: m.GetTable()}, nil
	}
	return nil, malformed("coordinator event with no known type")
}

func decodeAssign(m *AssignGroups) (lock.Message, error) {
	switch {
	case len(m.GetGroups()) > lock.GroupsMax:
		return nil, malformed("assignment names %d groups, max %d", len(m.GetGroups()), lock.GroupsMax)
	case len(m.GetFences()) > RegistryMax:
		return nil, malformed("assignment lists %d fences, max %d", len(m.GetFences()), RegistryMax)
	case len(m.GetSessions()) > RegistryMax:
		return nil, malformed("assignment lists %d sessions, max %d", len(m.GetSessions()), RegistryMax)
	}
	a := lock.AssignGroups{Epoch: m.GetEpoch()}
	var err error
	if a.Groups, err = decodeGroups(m.GetGroups()); err != nil {
		return nil, err
	}
	for _, pf := range m.GetFences() {
		f, err := decodeFence(pf, FenceTablesMax)
		if err != nil {
			return nil, err
		}
		a.Fences = append(a.Fences, f)
	}
	for _, r := range m.GetSessions() {
		f, err := decodeFence(&FenceDone{Clerk: r.GetClerk(), Session: r.GetSession(), Tables: r.GetTables()},
			lock.TablesPerClerkMax)
		if err != nil {
			return nil, err
		}
		a.Sessions = append(a.Sessions, lock.Registered(f))
	}
	return a, nil
}

func decodeFence(m *FenceDone, tablesMax int) (lock.FenceDone, error) {
	if len(m.GetTables()) > tablesMax {
		return lock.FenceDone{}, malformed("%d tables, max %d", len(m.GetTables()), tablesMax)
	}
	if err := checkName("clerk id", m.GetClerk()); err != nil {
		return lock.FenceDone{}, err
	}
	tables, err := decodeNames("table", m.GetTables())
	return lock.FenceDone{Clerk: m.GetClerk(), Session: m.GetSession(), Tables: tables}, err
}

// ---------- fields ----------

// checkName enforces the lock package's rule for clerk ids and table
// names: 1 to NameBytesMax bytes. (Protobuf has checked UTF-8.)
func checkName(what, s string) error {
	if s == "" || len(s) > lock.NameBytesMax {
		return malformed("%s of %d bytes, want 1 to %d", what, len(s), lock.NameBytesMax)
	}
	return nil
}

func decodeNames(what string, ss []string) ([]string, error) {
	for _, s := range ss {
		if err := checkName(what, s); err != nil {
			return nil, err
		}
	}
	if len(ss) == 0 {
		return nil, nil
	}
	return append([]string(nil), ss...), nil
}

// decodeMode accepts modes in [lo, hi].
func decodeMode(m Mode, lo, hi lock.Mode) (lock.Mode, error) {
	if m < Mode(lo) || m > Mode(hi) {
		return lock.None, malformed("mode %d not in [%v, %v]", m, lo, hi)
	}
	return lock.Mode(m), nil
}

func encodeGroup(g int) uint32 {
	if g < 0 || g >= lock.GroupsMax {
		panic(fmt.Sprintf("lockpb: group %d out of range", g))
	}
	return uint32(g)
}

func encodeGroups(gs []int) []uint32 {
	if len(gs) == 0 {
		return nil
	}
	out := make([]uint32, len(gs))
	for i, g := range gs {
		out[i] = encodeGroup(g)
	}
	return out
}

func decodeGroups(gs []uint32) ([]int, error) {
	if len(gs) == 0 {
		return nil, nil
	}
	out := make([]int, len(gs))
	for i, g := range gs {
		if g >= lock.GroupsMax {
			return nil, malformed("group %d, max %d", g, lock.GroupsMax-1)
		}
		out[i] = int(g)
	}
	return out, nil
}

func encodeHeldLocks(ls []lock.HeldLock) []*HeldLock {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*HeldLock, len(ls))
	for i, l := range ls {
		out[i] = &HeldLock{Lock: l.Lock, Mode: Mode(l.Mode), ReqId: l.ReqID}
	}
	return out
}

func decodeHeldLocks(ls []*HeldLock) ([]lock.HeldLock, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	out := make([]lock.HeldLock, len(ls))
	for i, l := range ls {
		mode, err := decodeMode(l.GetMode(), lock.Read, lock.Write)
		if err != nil {
			return nil, err
		}
		out[i] = lock.HeldLock{Lock: l.GetLock(), Mode: mode, ReqID: l.GetReqId()}
	}
	return out, nil
}

func encodeDead(ds []lock.DeadSession) []*DeadSession {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*DeadSession, len(ds))
	for i, d := range ds {
		out[i] = &DeadSession{Clerk: d.Clerk, Session: d.Session}
	}
	return out
}

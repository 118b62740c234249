package lockpb

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/plumeria-fs/plumeria/lock"
)

const id, sn = "n1", uint64(7)

func clerkMsgs() []lock.Message {
	return []lock.Message{
		lock.OpenTable{Clerk: id, Session: sn, Table: "fs0"},
		lock.CloseTable{Clerk: id, Session: sn, Table: "fs0", RenewSeq: 9},
		lock.Renew{Clerk: id, Session: sn, Seq: 3, Tables: []string{"fs0", "fs1"}},
		lock.Renew{Clerk: id, Session: sn, Seq: 4},
		lock.Request{Clerk: id, Session: sn, Table: "fs0", Lock: 1 << 62, Mode: lock.Write, ReqID: 11},
		lock.Release{Clerk: id, Session: sn, Table: "fs0", Lock: 5, ReqID: 11},
		lock.Downgrade{Clerk: id, Session: sn, Table: "fs0", Lock: 5, ReqID: 12},
		lock.Held{Clerk: id, Session: sn, Table: "fs0", Epoch: 4, Groups: []int{0, 3, lock.GroupsMax - 1},
			Locks:      []lock.HeldLock{{Lock: 1, Mode: lock.Read, ReqID: 2}, {Lock: lock.LogLock(id), Mode: lock.Write, ReqID: 1}},
			Pending:    []lock.HeldLock{{Lock: 9, Mode: lock.Write, ReqID: 3}},
			Recovering: []lock.DeadSession{{Clerk: "n2", Session: 4}}},
		lock.Held{Clerk: id, Session: sn, Table: "fs0", Epoch: 4, Groups: []int{1}},
		lock.RecoveryDone{Clerk: id, Session: sn, Table: "fs0", Dead: "n2", DeadSession: 4},
	}
}

func serverMsgs() []lock.Message {
	return []lock.Message{
		lock.RenewAck{Clerk: id, Session: sn, Seq: 3, Groups: []lock.GroupEpoch{{Group: 0, Epoch: 1}, {Group: 7, Epoch: 2}}},
		lock.RenewAck{Clerk: id, Session: sn, Seq: 4},
		lock.Grant{Clerk: id, Session: sn, Table: "fs0", Lock: 5, Mode: lock.Read, ReqID: 11, Epoch: 2},
		lock.Revoke{Clerk: id, Session: sn, Table: "fs0", Lock: 5, ReqID: 11, To: lock.None, Epoch: 2},
		lock.QueryHeld{Clerk: id, Session: sn, Table: "fs0", Epoch: 5, Groups: []int{2, 4}},
		lock.Recover{Clerk: id, Session: sn, Table: "fs0", Dead: "n2", DeadSession: 4, Epoch: 5},
		lock.Reject{Clerk: id, Session: sn, Table: "fs0", Lock: 5, ReqID: 11, Reason: lock.ReasonWaitersMax},
		lock.Reject{Clerk: id, Session: sn, Reason: lock.ReasonBadName},
		lock.Expired{Clerk: id, Session: sn},
	}
}

func events() []lock.Message {
	return []lock.Message{
		lock.AssignGroups{Epoch: 3, Groups: []int{1, 2},
			Fences:   []lock.FenceDone{{Clerk: "n2", Session: 4, Tables: []string{"fs0"}}},
			Sessions: []lock.Registered{{Clerk: "n1", Session: 7, Tables: []string{"fs0"}}}},
		lock.AssignGroups{Epoch: 4},
		lock.FenceDone{Clerk: "n2", Session: 4},
		lock.Recovered{Clerk: "n2", Session: 4, Table: "fs0"},
	}
}

// roundTrip marshals a frame to bytes and back, as the network does.
func roundTrip[T proto.Message](t *testing.T, in T, out T) T {
	t.Helper()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Run("clerk", func(t *testing.T) {
		f := roundTrip(t, EncodeClerk(id, sn, clerkMsgs()), &ClerkFrame{})
		gid, gsn, got, err := DecodeClerk(f)
		if err != nil || gid != id || gsn != sn || !reflect.DeepEqual(got, clerkMsgs()) {
			t.Fatalf("got %s/%d %+v, %v", gid, gsn, got, err)
		}
	})
	t.Run("hello", func(t *testing.T) {
		f := roundTrip(t, EncodeClerk(id, sn, nil), &ClerkFrame{})
		if gid, gsn, got, err := DecodeClerk(f); err != nil || gid != id || gsn != sn || got != nil {
			t.Fatalf("got %s/%d %+v, %v", gid, gsn, got, err)
		}
	})
	t.Run("server", func(t *testing.T) {
		f := roundTrip(t, EncodeServer(serverMsgs()), &ServerFrame{})
		got, err := DecodeServer(f, id, sn)
		if err != nil || !reflect.DeepEqual(got, serverMsgs()) {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("events", func(t *testing.T) {
		for _, e := range events() {
			got, err := DecodeEvent(roundTrip(t, EncodeEvent(e), &CoordEvent{}))
			if err != nil || !reflect.DeepEqual(got, e) {
				t.Fatalf("got %+v, %v; want %+v", got, err, e)
			}
		}
	})
}

func TestEncodePanicsOnMisuse(t *testing.T) {
	for name, f := range map[string]func(){
		"server msg to server":  func() { EncodeClerk(id, sn, []lock.Message{lock.Expired{Clerk: id, Session: sn}}) },
		"other session":         func() { EncodeClerk(id, sn, []lock.Message{lock.OpenTable{Clerk: id, Session: 1, Table: "t"}}) },
		"clerk msg to clerk":    func() { EncodeServer([]lock.Message{lock.OpenTable{Clerk: id, Session: sn, Table: "t"}}) },
		"clerk msg as an event": func() { EncodeEvent(lock.OpenTable{Clerk: id, Session: sn, Table: "t"}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	long := strings.Repeat("x", lock.NameBytesMax+1)
	clerk := map[string]*ClerkFrame{
		"nil frame":      nil,
		"no clerk id":    {Session: 1},
		"long clerk id":  {Clerk: long, Session: 1},
		"session 0":      {Clerk: id},
		"empty message":  {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{}}},
		"empty table":    {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_OpenTable{&OpenTable{}}}}},
		"nil open table": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_OpenTable{}}}},
		"request mode none": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Request{
			&Request{Table: "t", Mode: Mode_MODE_NONE}}}}},
		"request mode 9": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Request{
			&Request{Table: "t", Mode: 9}}}}},
		"held group out of range": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Held{
			&Held{Table: "t", Groups: []uint32{lock.GroupsMax}}}}}},
		"held lock mode none": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Held{
			&Held{Table: "t", Locks: []*HeldLock{{Lock: 1}}}}}}},
		"held dead without id": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Held{
			&Held{Table: "t", Recovering: []*DeadSession{{Session: 1}}}}}}},
		"renew too many tables": {Clerk: id, Session: 1, Msgs: []*ClerkMsg{{Msg: &ClerkMsg_Renew{
			&Renew{Tables: make([]string, lock.TablesPerClerkMax+1)}}}}},
		"too many messages": {Clerk: id, Session: 1, Msgs: make([]*ClerkMsg, FrameMessagesMax+1)},
	}
	for name, f := range clerk {
		t.Run("clerk/"+name, func(t *testing.T) {
			if _, _, _, err := DecodeClerk(f); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
	server := map[string]*ServerFrame{
		"nil frame":       nil,
		"empty message":   {Msgs: []*ServerMsg{{}}},
		"grant mode none": {Msgs: []*ServerMsg{{Msg: &ServerMsg_Grant{&Grant{Table: "t"}}}}},
		"revoke to write": {Msgs: []*ServerMsg{{Msg: &ServerMsg_Revoke{&Revoke{Table: "t", To: Mode_MODE_WRITE}}}}},
		"ack group out of range": {Msgs: []*ServerMsg{{Msg: &ServerMsg_RenewAck{&RenewAck{
			Groups: []*GroupEpoch{{Group: lock.GroupsMax}}}}}}},
		"query group out of range": {Msgs: []*ServerMsg{{Msg: &ServerMsg_QueryHeld{&QueryHeld{Table: "t",
			Groups: []uint32{1 << 31}}}}}},
		"reject reason 99": {Msgs: []*ServerMsg{{Msg: &ServerMsg_Reject{&Reject{Reason: 99}}}}},
		"recover no dead":  {Msgs: []*ServerMsg{{Msg: &ServerMsg_Recover{&Recover{Table: "t"}}}}},
	}
	for name, f := range server {
		t.Run("server/"+name, func(t *testing.T) {
			if _, err := DecodeServer(f, id, sn); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
	event := map[string]*CoordEvent{
		"nil":             nil,
		"empty":           {},
		"fence no clerk":  {Event: &CoordEvent_FenceDone{&FenceDone{Session: 1}}},
		"recovered table": {Event: &CoordEvent_Recovered{&Recovered{Clerk: "a", Table: long}}},
		"assign group": {Event: &CoordEvent_AssignGroups{&AssignGroups{Epoch: 1,
			Groups: []uint32{lock.GroupsMax}}}},
		"registry tables": {Event: &CoordEvent_AssignGroups{&AssignGroups{Epoch: 1,
			Sessions: []*Registered{{Clerk: "a", Tables: make([]string, lock.TablesPerClerkMax+1)}}}}},
	}
	for name, e := range event {
		t.Run("event/"+name, func(t *testing.T) {
			if _, err := DecodeEvent(e); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to the three decoders, as they would
// arrive from the network: they may fail, never panic, and whatever they
// accept survives an encode/decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, fr := range []proto.Message{EncodeClerk(id, sn, clerkMsgs()), EncodeServer(serverMsgs())} {
		b, _ := proto.Marshal(fr)
		f.Add(b)
	}
	for _, e := range events() {
		b, _ := proto.Marshal(EncodeEvent(e))
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x1a, 0x02, 0x3a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var cf ClerkFrame
		if proto.Unmarshal(b, &cf) == nil {
			if cid, csn, msgs, err := DecodeClerk(&cf); err == nil {
				back := roundTrip(t, EncodeClerk(cid, csn, msgs), &ClerkFrame{})
				if _, _, again, err := DecodeClerk(back); err != nil || !reflect.DeepEqual(again, msgs) {
					t.Fatalf("clerk frame round trip: %+v → %+v, %v", msgs, again, err)
				}
			}
		}
		var sf ServerFrame
		if proto.Unmarshal(b, &sf) == nil {
			if msgs, err := DecodeServer(&sf, id, sn); err == nil {
				back := roundTrip(t, EncodeServer(msgs), &ServerFrame{})
				if again, err := DecodeServer(back, id, sn); err != nil || !reflect.DeepEqual(again, msgs) {
					t.Fatalf("server frame round trip: %+v → %+v, %v", msgs, again, err)
				}
			}
		}
		var ev CoordEvent
		if proto.Unmarshal(b, &ev) == nil {
			if m, err := DecodeEvent(&ev); err == nil {
				again, err := DecodeEvent(roundTrip(t, EncodeEvent(m), &CoordEvent{}))
				if err != nil || !reflect.DeepEqual(again, m) {
					t.Fatalf("event round trip: %+v → %+v, %v", m, again, err)
				}
			}
		}
	})
}

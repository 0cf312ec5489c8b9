package fsm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// FuzzCommandDecode: decodeCommand decodes any body of the
// commands it serves (and the intent a put-intent carries) exactly as
// encoding/json does, which replicas of
// earlier releases apply the same entries with: both fail, or both give
// the same value. The seeds are valid bodies carrying every field, and
// bodies that lean on encoding/json's leniencies (names in another case,
// repeated names, invalid UTF-8, nulls, numbers in exponent form).
func FuzzCommandDecode(f *testing.F) {
	rich := StatusBatchRequest{Owner: "s2", Transitions: []StatusTransition{{
		Device: "dev-1", Seq: 9, Time: 10, Revision: 7, Status: "progressing", Reason: "1 of 2", NextRetry: 11, ProgressAt: 12,
		LastSeen: 13, AgentStatus: "applying", BlockedReason: "lock", Full: true,
		Resources: []ResourceStatus{{Key: "a/b", AppliedDigest: "ab", AppliedRevision: 7, Effective: "ok", State: "converged",
			Detail: "d", LastError: "e", Attempts: 2, UpdatedAt: 3, Corrections: 4, Hold: &ResourceHold{Kind: "override", Since: 1, Until: 2, Count: 3, Holder: "h", Note: "n"}}},
		ResourceStates: map[string]string{"a/b": "progressing"}, Basis: 5,
		Traffic:  &DeviceTraffic{AsOf: 1, Day: 2, Servers: []ServerTraffic{{Server: "x:1", TrafficCounts: TrafficCounts{SentBytes: 1, RecvBytes: 2, SentPackets: 3, RecvPackets: 4}}}, Previous: TrafficCounts{SentBytes: 5}},
		Edge:     true,
		Locks:    []DeviceLock{{Name: "l", Holder: "h", Since: 1, MaxHold: time.Minute, Source: "agent"}},
		Unlocked: []UnlockResult{{Index: 1, Lock: "l", Outcome: "broken", At: 2}},
		Recovery: &DeviceRecovery{At: 1, Unclean: true, Total: 2, Applied: 1, Steps: []DeviceRecoveryStep{{Key: "a/b", Outcome: "redone", Child: "c"}}},
	}}}
	sessions := DeviceSessionBatchRequest{Sessions: []DeviceSessionRequest{
		{ID: "dev-1", Labels: map[string]string{"region": "eu"}, SessionID: "s", Server: "s1", Conn: "c", Connected: true, AckedRevision: 3, Time: 4},
	}}
	for _, v := range []any{rich, sessions, sessions.Sessions[0]} {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"OWNER":"s1","Transitions":[{"DEVICE":"d","seq":1e2,"time":-5,"full":null,"resource_states":null}]}`,
		`{"owner":"a","owner":"b","transitions":[{"device":"d","device":"e"}]}`,
		"{\"owner\":\"\xff\xfe\",\"transitions\":[]}",
		`{"sessions":[{"id":"d","labels":{"k":"v","k":"w"},"connected":1}]}`,
		`{"id":"d","acked_revision":18446744073709551615,"time":1.0}`,
		`{"transitions":[{"locks":[{"max_hold":"1s"}]}]}`,
		`{"transitions":[{"traffic":{"servers":[{"server":"x","sent_bytes":1,"TrafficCounts":{"recv_bytes":2}}]}}]}`,
		`{"owner":"s1"} trailing`,
		`{"owner":"\u0000\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	put, err := json.Marshal(&PutIntentRequest{Intent: testIntent("intent-1", "x"), IfMatch: u64(3), Time: 1, Actor: Actor{Accessor: "acc", Name: "ops"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(put)
	f.Add([]byte(`{"intent":{"name":"a","selector":{"r":"eu"},"resources":[{"id":"x","type":"file","spec":{"n":1.5e300,"m":-0,"l":[1,"2",null,{"k":true}],"s":"\u00e9\ud83d\ude00"}}]} ,"time":1}`))
	f.Add([]byte(`{"intent": {"name" : "b" , "resources" : [ ] }  , "if_match":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(v1, v2 any) {
			t.Helper()
			err1 := json.Unmarshal(body, v1)
			err2 := decodeCommand(body, v2)
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("encoding/json: %v; decodeCommand: %v", err1, err2)
			}
			if err1 == nil {
				if diff := cmp.Diff(v1, v2); diff != "" {
					t.Fatalf("decoded differently (-encoding/json +decodeCommand):\n%s", diff)
				}
				// What cmp takes as equal may still encode apart (a
				// float's sign at zero): replicas store encodings.
				b1, e1 := json.Marshal(v1)
				b2, e2 := json.Marshal(v2)
				if string(b1) != string(b2) || (e1 == nil) != (e2 == nil) {
					t.Fatalf("decoded values encode differently: %s (%v) against %s (%v)", b1, e1, b2, e2)
				}
			}
		}
		check(new(StatusBatchRequest), new(StatusBatchRequest))
		check(new(DeviceSessionBatchRequest), new(DeviceSessionBatchRequest))
		check(new(DeviceSessionRequest), new(DeviceSessionRequest))
		check(new(putIntentWire), new(putIntentWire))
		check(new(intent.Intent), new(intent.Intent))
	})
}

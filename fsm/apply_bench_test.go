package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

// BenchmarkApplyPutIntent applies put-intent commands of about 512-byte
// documents to one replica, cycling through 1,000 names, as the
// benchmark of intent writes (bench/intents) does on every server.
func BenchmarkApplyPutIntent(b *testing.B) {
	f := newTestFSM(b, 0)
	cmds := make([][]byte, 1000)
	for i := range cmds {
		in := &intent.Intent{
			Name:     fmt.Sprintf("bench-%04d", i),
			Selector: map[string]string{"fleet": "bench"},
			Resources: []intent.Resource{{ID: "cfg", Type: "file", Spec: map[string]any{
				"path": "/etc/bench/" + fmt.Sprint(i), "content": strings.Repeat("x", 380),
			}}},
		}
		cmds[i] = mustEncode(b, PutIntentType, &PutIntentRequest{Intent: in, Time: 1})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// The same document again changes nothing; vary it so every
		// apply writes a revision.
		c := cmds[i%len(cmds)]
		c = []byte(strings.Replace(string(c), `"content":"x`, fmt.Sprintf(`"content":"%c`, 'a'+byte(i/len(cmds)%26)), 1))
		if res := f.Apply(uint64(i+1), c); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

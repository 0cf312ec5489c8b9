package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meteor-edge/meteor/fsm/intent"
)

func BenchmarkApplyPutIntentBatchTmp(b *testing.B) {
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
	const batch = 10
	b.ReportAllocs()
	b.ResetTimer()
	idx := uint64(0)
	for i := 0; i < b.N; i += batch {
		var ixs []uint64
		var data [][]byte
		for j := i; j < i+batch; j++ {
			c := cmds[j%len(cmds)]
			c = []byte(strings.Replace(string(c), `"content":"x`, fmt.Sprintf(`"content":"%c`, 'a'+byte(j/len(cmds)%26)), 1))
			idx++
			ixs = append(ixs, idx)
			data = append(data, c)
		}
		for _, res := range f.ApplyBatch(ixs, data) {
			if res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	}
}

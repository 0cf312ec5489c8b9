package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
)

// The intent document every Meteor write sends, with the name and the file
// content filled in. Its JSON has no insignificant spaces, so its size is
// exactly len(prefix+middle+suffix) + len(name) + len(payload).
const (
	docPrefix = `{"name":"`
	docMiddle = `","selector":{"region":"eu"},"resources":[{"id":"cfg","type":"file","spec":{"path":"/etc/bench/cfg","content":"`
	docSuffix = `"}}]}`
)

// fillerAlphabet holds the payload's characters: none needs escaping in
// JSON or YAML, so the document's size is what intentDoc says.
const fillerAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// etcdKeyPrefix is prepended to each intent name to form the etcd key.
const etcdKeyPrefix = "/meteor/intents/"

// docOverhead returns the size of the document for name without payload.
func docOverhead(name string) int {
	return len(docPrefix) + len(name) + len(docMiddle) + len(docSuffix)
}

// docVersions is how many versions of each key's document a workload
// holds. A client writes them in turn, so every write changes the
// document it replaces: Meteor applies a document equal to the stored one
// as a no-op (fsm.ApplyResult.Unchanged), which etcd does not, and a
// benchmark that wrote the same document again would compare Meteor's
// no-ops with etcd's writes.
const docVersions = 2

// intentDoc returns version v of a valid intent document named name whose
// JSON encoding is exactly size bytes; the file content pads it. The
// content is deterministic, and differs between names and between the
// versions of a name.
func intentDoc(name string, v, size int) ([]byte, error) {
	pad := size - docOverhead(name)
	if pad < 0 {
		return nil, fmt.Errorf("document size %d: the smallest document for %q is %d bytes", size, name, docOverhead(name))
	}
	if pad == 0 && v > 0 {
		return nil, fmt.Errorf("document size %d: no room for a second version of %q (at least %d bytes)", size, name, docOverhead(name)+1)
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	seed := int(h.Sum32()%uint32(len(fillerAlphabet))) + v
	b := make([]byte, 0, size)
	b = append(b, docPrefix...)
	b = append(b, name...)
	b = append(b, docMiddle...)
	for i := range pad {
		b = append(b, fillerAlphabet[(seed+7*i)%len(fillerAlphabet)])
	}
	b = append(b, docSuffix...)
	return b, nil
}

// keyName returns the name of key i of n, zero-padded so every name of a
// run has the same length (and so every document the same size).
func keyName(i, n int) string {
	width := len(strconv.Itoa(max(n-1, 0)))
	return fmt.Sprintf("bench-%0*d", width, i)
}

// clientKey returns the key that client c of clients sends as its j-th
// request. Each client cycles through its own slice of the key space, so
// concurrent clients never write the same key; keys must be >= clients.
func clientKey(c, clients, j, keys int) int {
	perClient := keys / clients
	return c + clients*(j%perClient)
}

// workload is the precomputed requests for one system: a write of key k
// goes to urls[server][k] with bodies[v][k], v being the key's next
// version (next).
type workload struct {
	system      string
	method      string
	contentType string
	urls        [][]string
	bodies      [docVersions][][]byte
	// written counts the writes sent for each key. Only the client that
	// owns a key in a window writes it (clientKey), and windows follow one
	// another, so no two goroutines use an element at once.
	written []uint32
}

func newWorkload(system, method string, servers, keys int) *workload {
	w := &workload{system: system, method: method, contentType: "application/json", urls: make([][]string, servers), written: make([]uint32, keys)}
	for s := range servers {
		w.urls[s] = make([]string, keys)
	}
	for v := range docVersions {
		w.bodies[v] = make([][]byte, keys)
	}
	return w
}

// keys returns the number of keys w writes.
func (w *workload) keys() int { return len(w.written) }

// next returns the body of the next write of key k: the version that
// differs from the one its last write sent.
func (w *workload) next(k int) []byte {
	v := w.written[k] % docVersions
	w.written[k]++
	return w.bodies[v][k]
}

// meteorWorkload builds PUT /v1/intents/{name} requests for every key.
func meteorWorkload(bases []string, keys, docSize int) (*workload, error) {
	w := newWorkload("meteor", "PUT", len(bases), keys)
	for k := range keys {
		name := keyName(k, keys)
		for v := range docVersions {
			doc, err := intentDoc(name, v, docSize)
			if err != nil {
				return nil, err
			}
			w.bodies[v][k] = doc
		}
		for s, base := range bases {
			w.urls[s][k] = base + "/v1/intents/" + url.PathEscape(name)
		}
	}
	return w, nil
}

// etcdPutRequest is the gateway's JSON form of etcdserverpb.PutRequest:
// bytes fields are base64.
type etcdPutRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// etcdPutBody returns the gateway request body that stores value at key.
func etcdPutBody(key string, value []byte) ([]byte, error) {
	return json.Marshal(etcdPutRequest{
		Key:   base64.StdEncoding.EncodeToString([]byte(key)),
		Value: base64.StdEncoding.EncodeToString(value),
	})
}

// etcdWorkload builds gateway put requests whose values are the same
// documents Meteor receives.
func etcdWorkload(bases []string, putPath string, keys, docSize int) (*workload, error) {
	w := newWorkload("etcd", "POST", len(bases), keys)
	for s, base := range bases {
		for k := range keys {
			w.urls[s][k] = base + putPath
		}
	}
	for k := range keys {
		name := keyName(k, keys)
		for v := range docVersions {
			doc, err := intentDoc(name, v, docSize)
			if err != nil {
				return nil, err
			}
			if w.bodies[v][k], err = etcdPutBody(etcdKeyPrefix+name, doc); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

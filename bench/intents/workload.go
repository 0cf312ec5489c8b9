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

// intentDoc returns a valid intent document named name whose JSON encoding
// is exactly size bytes; the file content pads it. The content is
// deterministic and differs between names.
func intentDoc(name string, size int) ([]byte, error) {
	pad := size - docOverhead(name)
	if pad < 0 {
		return nil, fmt.Errorf("document size %d: the smallest document for %q is %d bytes", size, name, docOverhead(name))
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	seed := int(h.Sum32() % uint32(len(fillerAlphabet)))
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

// workload is the precomputed requests for one system: request k goes to
// urls[server][k] with bodies[k].
type workload struct {
	system      string
	method      string
	contentType string
	urls        [][]string
	bodies      [][]byte
}

// meteorWorkload builds PUT /v1/intents/{name} requests for every key.
func meteorWorkload(bases []string, keys, docSize int) (*workload, error) {
	w := &workload{system: "meteor", method: "PUT", contentType: "application/json", urls: make([][]string, len(bases)), bodies: make([][]byte, keys)}
	for s := range bases {
		w.urls[s] = make([]string, keys)
	}
	for k := range keys {
		name := keyName(k, keys)
		doc, err := intentDoc(name, docSize)
		if err != nil {
			return nil, err
		}
		w.bodies[k] = doc
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
	w := &workload{system: "etcd", method: "POST", contentType: "application/json", urls: make([][]string, len(bases)), bodies: make([][]byte, keys)}
	for s, base := range bases {
		w.urls[s] = make([]string, keys)
		for k := range keys {
			w.urls[s][k] = base + putPath
		}
	}
	for k := range keys {
		name := keyName(k, keys)
		doc, err := intentDoc(name, docSize)
		if err != nil {
			return nil, err
		}
		if w.bodies[k], err = etcdPutBody(etcdKeyPrefix+name, doc); err != nil {
			return nil, err
		}
	}
	return w, nil
}

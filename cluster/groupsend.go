package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// groupSender sends what callers queue for another server in batches, as
// group commit: an item waits for no timer, only for a place among the
// batches in flight to its server, so a lone item goes at once and a
// burst goes in few requests. The forwarded writes (applyBatcher) and the
// forwarded reports (reportBatcher) use it.
type groupSender[C any] struct {
	// inFlight is the most batches under way to one server at once; a
	// batch holds at most maxItems items and maxBytes of them (size), one
	// larger item going alone.
	inFlight, maxItems, maxBytes int
	size                         func(C) int
	// send sends one batch to the server at addr and hands each item its
	// outcome.
	send func(addr string, batch []C)

	wg     sync.WaitGroup // the goroutines sending batches
	mu     sync.Mutex
	queues map[string]*groupQueue[C] // by the server's HTTP address; guarded by mu
	closed bool                      // set by wait; guarded by mu
}

// groupQueue is what is queued for one server.
type groupQueue[C any] struct {
	pending  []C
	inFlight int
}

func newGroupSender[C any](inFlight, maxItems, maxBytes int, size func(C) int, send func(string, []C)) *groupSender[C] {
	return &groupSender[C]{inFlight: inFlight, maxItems: maxItems, maxBytes: maxBytes, size: size, send: send, queues: map[string]*groupQueue[C]{}}
}

// queue queues c for the server at addr and, if a place is free, starts
// sending. It returns false, queueing nothing, once wait has been called.
func (g *groupSender[C]) queue(addr string, c C) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	q := g.queues[addr]
	if q == nil {
		q = &groupQueue[C]{}
		g.queues[addr] = q
	}
	q.pending = append(q.pending, c)
	var batch []C
	if q.inFlight < g.inFlight {
		batch = g.takeLocked(q)
		q.inFlight++
		g.wg.Add(1) // under mu: wait sets closed under it before waiting
	}
	g.mu.Unlock()
	if batch != nil {
		go g.run(addr, batch)
	}
	return true
}

// takeLocked removes the next batch from q (never empty). Called with mu
// held.
func (g *groupSender[C]) takeLocked(q *groupQueue[C]) []C {
	n, bytes := 0, 0
	for n < len(q.pending) && n < g.maxItems {
		bytes += g.size(q.pending[n])
		if n > 0 && bytes > g.maxBytes {
			break
		}
		n++
	}
	batch := q.pending[:n:n]
	q.pending = append([]C(nil), q.pending[n:]...)
	return batch
}

// run sends batch, then the batches queued meanwhile, until none is left.
func (g *groupSender[C]) run(addr string, batch []C) {
	defer g.wg.Done()
	for {
		g.send(addr, batch)
		g.mu.Lock()
		q := g.queues[addr]
		if len(q.pending) == 0 {
			q.inFlight--
			if q.inFlight == 0 {
				delete(g.queues, addr)
			}
			g.mu.Unlock()
			return
		}
		batch = g.takeLocked(q)
		g.mu.Unlock()
	}
}

// wait refuses what is queued from now on and waits for the batches in
// flight.
func (g *groupSender[C]) wait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// batchReader reads the body of a batch forwarded between servers (the
// forwarded writes' and reports'): a count of items, then each item's
// fields, numbers as unsigned varints and bytes after their length.
// Errors name the batch and the item being read.
type batchReader struct {
	buf  []byte
	kind string // the batch's, in errors: "batch", "report batch"
	item string // an item's, in errors: "command", "report"
	i    uint64 // the item being read
}

// newBatchReader reads the count of the batch in buf, each of whose
// items takes at least minItem bytes: no count may claim more than buf
// holds.
func newBatchReader(buf []byte, kind, item string, minItem int) (*batchReader, uint64, error) {
	n, k := binary.Uvarint(buf)
	if k <= 0 {
		return nil, 0, fmt.Errorf("%s: bad %s count", kind, item)
	}
	buf = buf[k:]
	if n == 0 || n > uint64(len(buf)/minItem) {
		return nil, 0, fmt.Errorf("%s: %d %ss in %d bytes", kind, n, item, len(buf))
	}
	return &batchReader{buf: buf, kind: kind, item: item}, n, nil
}

// next starts reading item i.
func (r *batchReader) next(i uint64) { r.i = i }

func (r *batchReader) fail(field string) error {
	return fmt.Errorf("%s: %s %d: bad %s", r.kind, r.item, r.i, field)
}

// uvarint reads a number.
func (r *batchReader) uvarint(field string) (uint64, error) {
	v, k := binary.Uvarint(r.buf)
	if k <= 0 {
		return 0, r.fail(field)
	}
	r.buf = r.buf[k:]
	return v, nil
}

// timeout reads the milliseconds an item has, at most an hour.
func (r *batchReader) timeout() (time.Duration, error) {
	ms, err := r.uvarint("timeout")
	if err != nil || ms > uint64(time.Hour.Milliseconds()) {
		return 0, r.fail("timeout")
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// bytes reads non-empty bytes after their length; they are not copied.
func (r *batchReader) bytes(field string) ([]byte, error) {
	l, err := r.uvarint(field + " length")
	if err != nil || l == 0 || l > uint64(len(r.buf)) {
		return nil, r.fail(field + " length")
	}
	b := r.buf[:l:l]
	r.buf = r.buf[l:]
	return b, nil
}

// end checks that nothing follows the last item.
func (r *batchReader) end() error {
	if len(r.buf) != 0 {
		return fmt.Errorf("%s: %d bytes after the last %s", r.kind, len(r.buf), r.item)
	}
	return nil
}

// appendTimeout appends, as batchReader.timeout reads them, the
// milliseconds of d, at least one.
func appendTimeout(buf []byte, d time.Duration) []byte {
	return binary.AppendUvarint(buf, uint64(max(d.Milliseconds(), 1)))
}

// appendBytes appends b after its length, as batchReader.bytes reads it.
func appendBytes[B string | []byte](buf []byte, b B) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(b))), b...)
}

// timeLeft is what is left of ctx's time, at most limit: what a batched
// item gives the server it goes to, its wait in the queue deducted.
func timeLeft(ctx context.Context, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(limit, time.Until(dl))
	}
	return limit
}

// streamAnswers answers a forwarded batch of n items: it writes each
// answer outs brings, as its item is done, as one JSON object a line
// (line makes it), flushing whenever no other answer is waiting. An
// answer that cannot be written (the other server went) is dropped; the
// rest are still taken from outs, which must have room for all n.
func streamAnswers[O any](w http.ResponseWriter, n int, outs <-chan O, line func(O) any) {
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	for range n {
		o := <-outs
		if enc.Encode(line(o)) == nil && flusher != nil && len(outs) == 0 {
			flusher.Flush()
		}
	}
}

// readAnswers reads the n answers of a forwarded batch, one JSON object a
// line, and hands each to deliver with the index of its item (index
// reads it). It fails on a stream that ends early or names an item twice
// or out of range; the items not delivered then have no answer.
func readAnswers[A any](body io.Reader, n int, index func(*A) int, deliver func(int, *A)) error {
	dec := json.NewDecoder(io.LimitReader(body, 16<<20))
	seen := make([]bool, n)
	for got := range n {
		a := new(A)
		if err := dec.Decode(a); err != nil {
			return fmt.Errorf("the stream ended after %d of %d: %w", got, n, err)
		}
		i := index(a)
		if i < 0 || i >= n || seen[i] {
			return fmt.Errorf("item %d of %d answered twice or out of range", i, n)
		}
		seen[i] = true
		deliver(i, a)
	}
	return nil
}

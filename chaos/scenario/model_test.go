package scenario

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func u(v uint64) *uint64 { return &v }

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func put(v string) Input             { return Input{Name: "a", Op: OpPut, Value: v} }
func putIf(v string, r uint64) Input { return Input{Name: "a", Op: OpPut, Value: v, IfMatch: u(r)} }
func get() Input                     { return Input{Name: "a", Op: OpGet} }
func rev(r uint64) Output            { return Output{Revision: r} }
func read(r uint64, v string) Output { return Output{Found: true, Revision: r, Value: v} }

const never = 1 << 40

func TestModel(t *testing.T) {
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"absent then written", []porcupine.Operation{
			op(0, 0, 1, get(), Output{}),
			op(0, 2, 3, put("x"), rev(5)), // revisions are cluster-wide: gaps are fine
			op(1, 4, 5, get(), read(5, "x")),
		}, true},
		{"stale read", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(1)),
			op(0, 2, 3, put("y"), rev(2)),
			op(1, 4, 5, get(), read(1, "x")),
		}, false},
		{"revision not increasing", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(4)),
			op(0, 2, 3, put("y"), rev(3)),
		}, false},
		{"concurrent puts in either order", []porcupine.Operation{
			op(0, 0, 10, put("x"), rev(2)),
			op(1, 0, 10, put("y"), rev(1)),
			op(2, 11, 12, get(), read(2, "x")),
		}, true},
		{"if-match applied", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(3)),
			op(0, 2, 3, putIf("y", 3), rev(7)),
			op(0, 4, 5, get(), read(7, "y")),
		}, true},
		{"if-match must match", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(3)),
			op(0, 2, 3, putIf("y", 2), rev(7)),
		}, false},
		{"conflict when it matched", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(3)),
			op(0, 2, 3, putIf("y", 3), Output{Conflict: true, Current: u(3)}),
		}, false},
		{"conflict with the current revision", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(3)),
			op(0, 2, 3, putIf("y", 0), Output{Conflict: true, Current: u(3)}),
		}, true},
		{"unknown put that happened", []porcupine.Operation{
			op(0, 0, never, put("x"), Output{Unknown: true}),
			op(1, 5, 6, get(), read(9, "x")),
			op(1, 7, 8, putIf("y", 9), rev(10)),
		}, true},
		{"unknown put that did not happen", []porcupine.Operation{
			op(0, 0, never, put("x"), Output{Unknown: true}),
			op(1, 5, 6, get(), Output{}),
		}, true},
		{"unknown put cannot un-happen", []porcupine.Operation{
			op(0, 0, never, put("x"), Output{Unknown: true}),
			op(1, 5, 6, get(), read(9, "x")),
			op(1, 7, 8, get(), Output{}),
		}, false},
		{"unknown put's revision is above the previous", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(4)),
			op(0, 2, never, put("y"), Output{Unknown: true}),
			op(1, 5, 6, get(), read(4, "y")),
		}, false},
		{"lost acknowledged write", []porcupine.Operation{
			op(0, 0, 1, put("x"), rev(1)),
			op(0, 2, 3, put("y"), rev(2)),
			op(1, 4, 5, get(), read(2, "y")),
			op(1, 6, 7, get(), read(1, "x")),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tt.ops); got != tt.want {
				t.Errorf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestModelPartitions checks that intents are checked independently.
func TestModelPartitions(t *testing.T) {
	b := func(in Input) Input { in.Name = "b"; return in }
	ops := []porcupine.Operation{
		op(0, 0, 1, put("x"), rev(1)),
		op(0, 2, 3, b(put("y")), rev(2)),
		op(1, 4, 5, get(), read(1, "x")),
		op(1, 6, 7, b(get()), read(2, "y")),
	}
	if !porcupine.CheckOperations(Model, ops) {
		t.Error("independent intents judged not linearizable")
	}
}

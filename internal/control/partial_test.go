package control

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"testing"
)

// partialHandler answers every request with a result that lacks a part.
type partialHandler struct{}

func (partialHandler) Handle(ctx context.Context, req *Request) (any, error) {
	return Partial{Result: []int{1, 2}, Missing: []string{"process 42 did not answer inspect"}}, nil
}

func (partialHandler) Capture(ctx context.Context, req *Request) (func(context.Context, io.Writer) error, error) {
	return nil, errors.New("no capture")
}

// A partial answer reaches the client whole, with what it lacks as an IncompleteError.
func TestPartialAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: partialHandler{}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var got []int
	err = NewClient(path).Do(context.Background(), Request{Verb: VerbInspect}, &got)
	var inc *IncompleteError
	if !errors.As(err, &inc) || !reflect.DeepEqual(inc.Missing, []string{"process 42 did not answer inspect"}) {
		t.Fatalf("Do: %v, want an IncompleteError naming process 42", err)
	}
	if !reflect.DeepEqual(got, []int{1, 2}) {
		t.Fatalf("result %v, want [1 2]", got)
	}
}

package freezer

import (
	"net"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/closecheck"
)

// A connection accepted while Close runs (Accept had returned it, the Freezer had not kept it
// yet) is closed too, and not passed on to the server, and Close waits for the accept loop:
// left open, its client would hang on it for good, after the test that started the Freezer
// ended. So whether the Freezer would pass the connection on or hold it
// unanswered.
func TestCloseClosesAConnectionAcceptedDuringClose(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(map[bool]string{false: "passing", true: "holding"}[hold], func(t *testing.T) {
			closeDuringAccept(t, hold)
		})
	}
}

func closeDuringAccept(t *testing.T, hold bool) {
	server, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	accepted, release := make(chan struct{}), make(chan struct{})
	letGo := closecheck.LetGo(release)
	defer letGo()
	f := start(t, server.Addr().String(), func() {
		accepted <- struct{}{}
		<-release
	})
	if hold {
		f.Hold()
	}
	closecheck.AcceptedDuringClose(t, f.Addr(), accepted, letGo, f.Close)
	server.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if s, err := server.Accept(); err == nil {
		s.Close()
		t.Fatal("the Freezer connected to the server for a connection accepted during Close")
	}
}

package container

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestLifelineCloseRace: a watcher that connects while close runs is
// either closed by close or refused; close does not wait for a connection
// it never saw (it would wait until that container ended).
func TestLifelineCloseRace(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("unix sockets")
	}
	for i := range 20 {
		l := &Launcher{}
		dir := t.TempDir()
		path, err := l.lifeline(dir)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var held []net.Conn
		stop := make(chan struct{})
		var dialers sync.WaitGroup
		for range 4 {
			dialers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.Dial("unix", path)
					if err != nil {
						return // the listener is closed
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Millisecond)
		closed := make(chan struct{})
		go func() {
			l.life.close()
			close(closed)
		}()
		var hung bool
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			hung = true
		}
		close(stop)
		dialers.Wait()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
		<-closed
		if hung {
			t.Fatalf("round %d: close still waits after 5s for a connection accepted as it ran", i)
		}
	}
}

package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards a fixed loopback address to a target, and can be taken
// down and brought back on the same address: a Git server outage.
type tcpProxy struct {
	addr, target string

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target, conns: map[net.Conn]bool{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.addr = p.listener.Addr().String()
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.listener = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(in)
		}
	}()
	return nil
}

func (p *tcpProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(out, in); out.Close() }()
	_, _ = io.Copy(in, out)
	in.Close()
}

// down closes the listener and every connection.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != nil {
		p.listener.Close()
		p.listener = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// up listens on the same address again.
func (p *tcpProxy) up(t *testing.T) {
	t.Helper()
	if err := p.listen(p.addr); err != nil {
		t.Fatalf("listening on %s again: %v", p.addr, err)
	}
}

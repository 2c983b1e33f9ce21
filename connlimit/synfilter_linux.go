package connlimit

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// Classic BPF constants of a socket filter (linux/filter.h). Loads at
// skfNetOff+n read the network header; plain offsets read the TCP header,
// where a TCP socket's filter starts.
const (
	skfNetOff    = 0xFFF00000 // SKF_NET_OFF, -0x100000 as a uint32
	acceptPacket = 0xFFFFFFFF // keep the whole packet
	dropPacket   = 0
	tcpFlagsOff  = 13 // the flags byte of the TCP header
	flagSYN      = 0x02
	flagACK      = 0x10
	etherIPv4    = 0x0800
	etherIPv6    = 0x86DD
	ipv4SrcOff   = 12 // source address in the IPv4 header
	ipv6SrcOff   = 8  // source address in the IPv6 header

	// maxFilterInsns keeps a program under the kernel's 4096 instructions.
	maxFilterInsns = 4000
)

// newSYNInstaller returns the function that installs a program dropping
// the SYNs of a set of keys on inner's socket, after installing one that
// drops nothing, which checks that the socket takes filters. An MPTCP
// socket, Go's default for listeners since Go 1.24 on kernels with MPTCP,
// does not.
func newSYNInstaller(inner net.Listener) (func([]clientkey.Key) (int, error), error) {
	sc, ok := inner.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("connlimit: SYNFilter needs a TCP listener (got %T)", inner)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("connlimit: SYNFilter: %w", err)
	}
	install := func(keys []clientkey.Key) (int, error) {
		prog, n := synFilterProgram(keys)
		raw, err := bpf.Assemble(prog)
		if err != nil {
			return 0, fmt.Errorf("connlimit: assembling the SYN filter: %w", err)
		}
		filter := make([]unix.SockFilter, len(raw))
		for i, r := range raw {
			filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog)
		}); err != nil {
			return 0, fmt.Errorf("connlimit: installing the SYN filter: %w", err)
		}
		if serr != nil {
			return 0, fmt.Errorf("connlimit: installing the SYN filter: %w", serr)
		}
		return n, nil
	}
	if _, err := install(nil); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w (an MPTCP listener? listen with net.ListenConfig.SetMultipathTCP(false))", err)
		}
		return nil, err
	}
	return install, nil
}

// synFilterProgram returns a classic BPF socket filter that drops the
// connection requests (SYN without ACK) whose source lies in one of keys,
// and keeps every other packet: the handshakes of other clients, and every
// packet of established connections, which inherit the program. It holds
// as many keys as fit in maxFilterInsns, IPv4 first, and returns how many.
//
// Layout: a head that keeps non-SYN packets and jumps by protocol to an
// IPv4 and an IPv6 section; each section tests its keys one after another,
// each test ending in its own drop, so that every conditional jump is short.
func synFilterProgram(keys []clientkey.Key) ([]bpf.Instruction, int) {
	var v4, v6 []clientkey.Key
	for _, k := range keys {
		if k.Prefix().Addr().Is4() {
			v4 = append(v4, k)
		} else {
			v6 = append(v6, k)
		}
	}
	// Sorted so that equal sets give equal programs.
	cmp := func(a, b clientkey.Key) int { return a.Prefix().Addr().Compare(b.Prefix().Addr()) }
	slices.SortFunc(v4, cmp)
	slices.SortFunc(v6, cmp)

	budget := maxFilterInsns - 12
	var sec4, sec6 []bpf.Instruction
	n := 0
	for _, k := range v4 {
		t := prefixTest(k, ipv4SrcOff)
		if len(t) > budget {
			break
		}
		sec4, budget, n = append(sec4, t...), budget-len(t), n+1
	}
	for _, k := range v6 {
		t := prefixTest(k, ipv6SrcOff)
		if len(t) > budget {
			break
		}
		sec6, budget, n = append(sec6, t...), budget-len(t), n+1
	}
	sec4 = append(sec4, bpf.RetConstant{Val: acceptPacket})
	sec6 = append(sec6, bpf.RetConstant{Val: acceptPacket})

	head := []bpf.Instruction{
		bpf.LoadAbsolute{Off: tcpFlagsOff, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: flagSYN | flagACK},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: flagSYN, SkipTrue: 1},
		bpf.RetConstant{Val: acceptPacket},
		bpf.LoadExtension{Num: bpf.ExtProto},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherIPv4, SkipFalse: 1},
		bpf.Jump{Skip: 3}, // to sec4
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherIPv6, SkipFalse: 1},
		bpf.Jump{Skip: uint32(1 + len(sec4))}, // to sec6
		bpf.RetConstant{Val: acceptPacket},
	}
	prog := slices.Concat(head, sec4, sec6)
	return prog, n
}

// prefixTest returns the instructions that drop a packet whose source
// address, at srcOff in the network header, lies in k's prefix, and fall
// through to the next test otherwise.
func prefixTest(k clientkey.Key, srcOff uint32) []bpf.Instruction {
	p := k.Prefix()
	addr := p.Addr().AsSlice()
	bits := p.Bits()
	words := (bits + 31) / 32
	var t []bpf.Instruction
	for i := range words {
		word := uint32(addr[4*i])<<24 | uint32(addr[4*i+1])<<16 | uint32(addr[4*i+2])<<8 | uint32(addr[4*i+3])
		mask := ^uint32(0)
		if rest := bits - 32*i; rest < 32 {
			mask <<= 32 - rest
		}
		t = append(t, bpf.LoadAbsolute{Off: skfNetOff + srcOff + uint32(4*i), Size: 4})
		if mask != ^uint32(0) {
			t = append(t, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
		}
		// The skip to the next key is filled in below, once the test's
		// length is known.
		t = append(t, bpf.JumpIf{Cond: bpf.JumpEqual, Val: word & mask})
	}
	t = append(t, bpf.RetConstant{Val: dropPacket})
	for i, ins := range t {
		if j, ok := ins.(bpf.JumpIf); ok {
			j.SkipFalse = uint8(len(t) - i - 1)
			t[i] = j
		}
	}
	return t
}

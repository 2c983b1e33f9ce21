// Package proxyproto reads and writes the PROXY protocol header, versions 1
// (text) and 2 (binary), with which a load balancer or TCP proxy tells the
// server behind it who the real client of a connection is.
//
// [ReadHeader] reads one header from the start of a connection and nothing
// after it, so the application's own bytes are left intact in the
// [bufio.Reader]. It never panics on any input and bounds what it reads: a
// version 1 line is at most 107 bytes ([MaxV1Length]) and a version 2
// address-and-TLV block at most the limit its caller gives (4096 bytes by
// default). [Header.AppendV1] and [Header.AppendV2] write a header, for tests
// and for proxies that speak PROXY protocol to their upstreams.
//
// A header is only as true as the peer that sent it: read one only from
// peers you trust (package connlimit reads it only from its Trusted set).
//
// The format is specified at
// https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt. Deliberate
// choices where the specification leaves room:
//
//   - Version 1 is parsed strictly: single spaces, "\r\n" at the end,
//     addresses of the announced family, decimal ports without sign or
//     leading zero. "UNKNOWN" may be followed by anything up to "\r\n",
//     which is ignored as the specification requires.
//   - A version 2 LOCAL header carries no client: its address block is
//     skipped, whatever family it announces.
//   - A version 2 header of family AF_UNIX, or AF_UNSPEC, is accepted and
//     names no client (the zero Source and Destination), as does version 1
//     "UNKNOWN". The reader of the header decides what that means.
//   - TLVs are checked to fit the header exactly and are returned raw;
//     none is interpreted (CRC32C included).
package proxyproto

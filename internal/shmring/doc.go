// Package shmring is the data path of the attach channel between the pibgw daemon and the
// processes attached to it: a single-producer, single-consumer ring of variable-length
// records in shared memory, with eventfd doorbells. Each attached process has two rings,
// one per direction; each record is one IB packet, tagged with a 16-bit tag (the device
// and port it belongs to) and 16 bits of flags. The control socket carries the rings'
// descriptors (Fds, then Open on the other side) and tells the daemon when a process
// dies; the rings themselves never learn that.
//
// # Layout
//
// A ring is a memfd (sealed against shrinking and growing, so that the other process
// cannot cut the mapping short under us: Open refuses an unsealed one) holding a 4 KiB
// header page and then the data area, a power of two of bytes, mapped MAP_SHARED by both
// processes. The header holds a magic and version, the data size, a closed word (either
// side's Close), and on its own cache line (128 bytes apart) each side's words: the
// producer's head (bytes ever published), its "waiting for space" flag and the tail it
// wants before it is woken; the consumer's tail (bytes ever released) and its "asleep"
// flag. A record is an 8-byte header — u32 length, u16 tag, u16 flags, little-endian —
// and the payload padded to 8 bytes; a record that does not fit before the end of the
// data area is preceded by a wrap marker (a header with length 0xffffffff) and goes at
// offset 0. Records are at most MaxRecord (64 KiB + 256) bytes long. A producer that finds
// the ring empty past its first 64 KiB also writes a wrap marker and goes back to offset 0,
// moving the tail past the bytes it skipped (a compare-and-swap, valid only while the tail
// is the head; the consumer takes a tail moved ahead of its own as its position), so that
// traffic that never fills the ring (request/response) keeps to pages both sides
// have touched — each side touches those 64 KiB when it maps the ring — instead of a page
// fault in each process for every fresh page on its first way round (on the virtual
// machines of development, a 4 KiB ping-pong took 150 µs a round trip until it had been
// round a 4 MiB ring once, then 6–15 µs).
//
// Two eventfds (non-blocking) are the doorbells: "data", which the producer rings after
// it publishes if the consumer's flag says it sleeps, and "space", which the consumer
// rings after it releases if the producer waits (and the tail it wanted is reached).
// Every index and flag is read and written with sync/atomic; a sleeper sets its flag,
// then looks at the ring again before it blocks, and the other side stores its index
// before it reads the flag, so no wake-up is lost.
//
// # Trust
//
// The two sides are different processes, and the other may be buggy or malicious. Each
// side keeps its own index in its own memory and never takes it back from the shared
// page. The consumer checks everything it reads there — head within [tail, tail+size]
// and 8-aligned, every length within MaxRecord, within the data area and within what was
// published, every wrap marker — and reports ErrCorrupt rather than read out of bounds or
// panic; the producer accepts a tail only within [head-size, head]. But the records Read
// hands over are slices of the shared memory itself: the other process can change those
// bytes while the callback reads them. A consumer that must trust the content (the
// daemon, which polices what processes send) copies a record before it checks it.
//
// # Waiting
//
// Read, and a Write waiting for space, re-check the ring 5000 times (yielding to other
// goroutines every 64; about 10 µs, measured) before they sleep on a doorbell. A ping-pong
// needs that much to stay out of the doorbells: with 1000 to 2000 (2 to 5 µs) some runs
// settled at 8 to 22 µs round trips, the spin ending before the sleeping peer had woken
// and answered, both sides then sleeping every time.
// After a burst the spin costs at most those 10 µs of processor time, about what a sleep
// and wake-up cost anyway. SetSpin(0) turns it off, which is the better choice where the
// two processes compete for processors with other work (below).
//
// Every 64th check of a spin yields the processor to Go's scheduler and, from the 256th
// check on, every other 32nd to the operating system (sched_yield(2), OSYield): where busy processes
// outnumber processors (the attach channel runs three — a program, the daemon, its peer
// — and they may share two cores), the process a spinner waits for is often queued
// behind it on its own processor and would otherwise wait for the end of its time slice
// (milliseconds). Measured between attached processes on two loaded cores
// (attach's benchmarks, same-script A/B, medians of 3), a yield every 128th check against
// none: 64 KiB RDMA WRITE 1.2 → 3.1 GB/s, 8-byte SEND ping-pong p50 63 → 40 µs and p99
// 6.3 ms → 165 µs, 64-byte UD 175 k → 1.3 M messages/s; every 32nd did better again,
// every 1024th worse. With no other runnable thread, sched_yield returns at once.
//
// Sleeping, a goroutine blocks in poll(2) and read(2) on the eventfd, holding its thread
// (waitBlocking), rather than parking in Go's netpoller through an os.File
// (waitNetpoll): measured with the spin off, a ping-pong between two processes takes
// 4.9 µs with poll(2) and 21 µs through the netpoller (between two goroutines of one
// process, 5.1 and 5.0 µs), and throughput is the same. The price: each sleeping Read or
// Write occupies an OS thread, and the goroutine's P stays with it until the runtime
// hands it off, which can delay other goroutines of a process with GOMAXPROCS=1 by tens
// of microseconds.
//
// # Figures
//
// On the 2-core AMD EPYC (virtual) machine of development, Go 1.26, medians of 3 runs of
// go test -bench . -benchtime 1s (BenchmarkPingPong64, BenchmarkThroughput4K), against
// a Unix SOCK_SEQPACKET socketpair used through os.File ("unix") or blocking system calls
// ("unix-blocking"); 0 allocations per operation everywhere:
//
//	                            ping-pong, p50 round trip      throughput, 16 x 4 KiB batches
//	                            goroutines   processes         goroutines   processes
//	ring (poll(2), spin 5000)   310 ns       291 ns            34.3 GB/s    34.7 GB/s
//	ring, netpoller, spin 5000  311 ns       291 ns            35.4 GB/s    34.0 GB/s
//	ring, poll(2), no spin      5.1 µs       4.9 µs            32.9 GB/s    33.0 GB/s
//	ring, netpoller, no spin    5.0 µs       21.4 µs           32.3 GB/s    28.1 GB/s
//	unix                        7.7 µs       37.8 µs           6.1 GB/s     3.9 GB/s
//	unix-blocking               7.9 µs       8.1 µs            5.0 GB/s     4.9 GB/s
//
// Throughput is 4 KiB records written 16 per Write and copied out by the consumer,
// against the same packets framed into one 64 KiB message per batch; single throughput
// runs vary (some fall to 3-20 GB/s) with how the scheduler places the two sides. With a
// go test -race of another package running beside the benchmark, the spinning ring's
// cross-process ping-pong rose to 34 µs while the non-spinning one stayed at 5 µs:
// spinning pays only when each side has a processor.
//
// # Use
//
// One goroutine at a time writes (callers serialise Write with their own lock) and one
// reads; Close may be called from any goroutine, except from inside a Read callback, and
// wakes both (they return ErrClosed), in this process and, through the closed word and
// the doorbells, in the other. Records published before the producer closed are still
// delivered. A consumer of several rings sleeps on all their doorbells with WaitAny; the
// statistics words (AddStat, LoadStat) carry counts the ring itself never reads.
package shmring

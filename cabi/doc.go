// Package cabi holds pibgw's C libraries and their tests. The libraries themselves live
// in subdirectories built by scripts/build-libs.sh with cgo and rdma-core's headers:
//
//	ibverbs/   libibverbs.so.1: unmodified libibverbs programs on a pibgw daemon's HCAs;
//	           also the Go side of librdmacm.so.1 (cma.go), so both share one Go runtime
//	rdmacm/    librdmacm.so.1: rdma_cm's C API (plain C, linked against the above)
//
// They are package main behind the build tag pibgw_cabi, so ordinary builds (also with
// CGO_ENABLED=0) leave them out. The tests here build them into a temporary directory and
// run rdma-core's and perftest's programs against an in-process fabric's attach socket;
// they skip, saying why, where the headers, gcc or the programs are missing.
package cabi

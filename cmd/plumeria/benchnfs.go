package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/plumeria-fs/plumeria/bench/fsbench"
	"github.com/plumeria-fs/plumeria/frontend/nfs"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Bounds of `bench nfs`'s flags.
const (
	benchNFSClientsMax = 256
	benchNFSFilesMax   = 1_000_000
	benchNFSRunsMax    = 99
	// benchNFSChunkBytes is the sequential phase's request size: a WRITE
	// or READ of the gateway's wtmax and rtmax, a write(2) or read(2) on
	// DIR.
	benchNFSChunkBytes  = 1 << 20
	benchNFSSeqBytesMax = 64 << 30
	// benchNFSQDMax is the gateway's default bound on the requests it
	// serves at once per connection (nfs.Options.MaxInFlight): more only
	// wait in its socket.
	benchNFSQDMax = 128
	// benchNFSCallTimeout replaces go-nfs-client's 5 s reply timeout, after
	// which it resends the call: a resent GUARDED CREATE whose first copy
	// was served fails with NFS3ERR_EXIST. A durable CREATE may wait out
	// a failover of the log's volume.
	benchNFSCallTimeout = time.Minute
	benchMetricsTimeout = 10 * time.Second
)

// The series the batching factors are computed from (docs/operations.md,
// Metrics). logWrites is the histogram of records per redo log write: its
// _count is the number of log writes carrying records (redo.Stats.Batches).
const (
	metricDurableWaits = "plumeria_nfs_durable_waits_total"
	metricLogWrites    = "plumeria_fs_log_batch_records_count"
	metricFuseOps      = "plumeria_fuse_op_seconds_count"
)

// benchNFSConfig is what `plumeria bench nfs` runs.
type benchNFSConfig struct {
	gateway        string // HOST:PORT of the NFS gateway
	export         string // the export's name (the volume's), without "/"
	gatewayMetrics string // HOST:PORT of the gateway's /metrics; "" none
	mountMetrics   string // HOST:PORT of the mount's /metrics; "" none
	dir            string // the FUSE mount (or any directory)
	clients        []int  // concurrent clients, one run each
	files          int    // files each client creates per run
	runs           int    // rounds of every client count; medians are printed
	seqSize        string // --seq-size as given; seqBytes once checked
	seqBytes       int64  // bytes of the sequential phase's file; 0 skips it
	qd             int    // the sequential phase's requests in flight over NFS
	log            io.Writer
}

func benchNFSCmd() *cobra.Command {
	cfg := benchNFSConfig{log: os.Stderr}
	c := &cobra.Command{
		Use:   "nfs --gateway HOST:PORT [--export NAME] [--clients 1,4,16] [--files N] [--seq-size 256MiB] [--qd 8] [--runs N] DIR",
		Short: "NFS against FUSE: group commit of synchronous creates, and sequential write and read throughput",
		Long: "`plumeria bench nfs` compares the NFS gateway with a FUSE mount of the same volume: the redo\n" +
			"log's group commit as clients see it, then sequential throughput. For each client count N of\n" +
			"--clients it runs N clients at once, each creating --files empty files one after the other\n" +
			"in a directory of its own, and times each create:\n" +
			"  over NFS: each client has its own TCP connection to the gateway (go-nfs-client, AUTH_SYS\n" +
			"  uid 0: the gateway needs --no-root-squash) and sends one GUARDED CREATE per file, with the\n" +
			"  directory's handle; the gateway replies once the create is durable;\n" +
			"  on DIR: each client is a goroutine doing open(O_CREAT|O_EXCL), fsync, close per file. DIR is\n" +
			"  a FUSE mount of the same volume (or any directory, for reference).\n" +
			"Results go to stdout, one line per metric (name value unit), progress to stderr:\n" +
			"  nfs_create_cN ops/s                  creates per second, all N clients together\n" +
			"  nfs_create_cN_latency us             the median create, as its client saw it\n" +
			"  nfs_create_cN_latency_p99 us         its 99th percentile (nearest rank)\n" +
			"  nfs_create_cN_batching waits/log_write   with --gateway-metrics: the batching factor,\n" +
			"      the run's increase of " + metricDurableWaits + " (requests that waited\n" +
			"      for the log) over that of " + metricLogWrites + " (redo log\n" +
			"      writes carrying records) on the gateway's /metrics\n" +
			"  fuse_create_fsync_cN ops/s, _latency us, _latency_p99 us   the same on DIR\n" +
			"  fuse_create_fsync_cN_batching fsyncs/log_write   with --mount-metrics: the run's increase of\n" +
			"      " + metricFuseOps + "{op=\"fsync\"} over that of " + metricLogWrites + "\n" +
			"      on the mount's /metrics (plumeria mount --metrics-listen, plumeria up --http)\n" +
			"  nfs_create_cN_ratio ratio(higher=better)   NFS ops/s over DIR's\n" +
			"Then, unless --seq-size is 0, the sequential phase writes a file of --seq-size and reads it\n" +
			"back, 1 MiB per request, a deterministic pseudo-random pattern that every read checks:\n" +
			"  nfs_seq_write MiB/s   one connection: a GUARDED CREATE (not timed), then UNSTABLE WRITEs\n" +
			"      with --qd in flight (pipelined, as the Linux client sends them), then one COMMIT; the\n" +
			"      time ends with the COMMIT's reply. Every WRITE's verifier must be the COMMIT's.\n" +
			"  nfs_seq_read MiB/s    READs of the file, --qd in flight on one connection\n" +
			"  fuse_seq_write_fsync MiB/s   on DIR: open(O_CREAT|O_EXCL) (not timed), write(2)s, fsync, close\n" +
			"  fuse_seq_read MiB/s   on DIR: open (not timed), read(2)s to the end (the kernel reads ahead)\n" +
			"  nfs_seq_write_ratio, nfs_seq_read_ratio ratio(higher=better)   NFS MiB/s over DIR's\n" +
			"  No cache is dropped between write and read: the NFS read may come from the gateway's data\n" +
			"  cache, the FUSE read from the mount's fs node's (the mount opens files without\n" +
			"  FOPEN_KEEP_CACHE, so the kernel drops its cached pages at the open).\n" +
			"With --runs R every client count and the sequential phase run R times (NFS then DIR,\n" +
			"interleaved) and each line is the median of its R values; each run's lines go to stderr.\n" +
			"The runs' directories (bench-nfs-*) are removed after the last run, so that no removal's\n" +
			"background work slows a run. Keep the gateway and the mount otherwise idle: the factors\n" +
			"count every request and log write of their fs node.",
		Example: "  plumeria up --dir /tmp/p --http 127.0.0.1:7010 &\n" +
			"  plumeria gateway --coord 127.0.0.1:7001 --volume default --listen 127.0.0.1:2049 --allow 127.0.0.1 \\\n" +
			"      --no-root-squash --metrics-listen 127.0.0.1:9102 &\n" +
			"  plumeria bench nfs --gateway 127.0.0.1:2049 --gateway-metrics 127.0.0.1:9102 \\\n" +
			"      --mount-metrics 127.0.0.1:7010 --runs 3 /tmp/p/mnt",
		Args: cobra.ExactArgs(1),
	}
	f := c.Flags()
	f.StringVar(&cfg.gateway, "gateway", "", "HOST:PORT the NFS gateway serves on (plumeria gateway --listen)")
	f.StringVar(&cfg.export, "export", "default", "the export's name: the gateway's --volume")
	f.StringVar(&cfg.gatewayMetrics, "gateway-metrics", "", "HOST:PORT of the gateway's /metrics (its --metrics-listen), for the NFS batching factor")
	f.StringVar(&cfg.mountMetrics, "mount-metrics", "", "HOST:PORT of the /metrics of DIR's fs node (mount --metrics-listen, up --http), for its batching factor")
	f.IntSliceVar(&cfg.clients, "clients", []int{1, 4, 16}, fmt.Sprintf("client counts, one run each (1 to %d)", benchNFSClientsMax))
	f.IntVar(&cfg.files, "files", 500, "files each client creates per run")
	f.StringVar(&cfg.seqSize, "seq-size", "256MiB", "bytes of the sequential phase's file (0: skip the phase)")
	f.IntVar(&cfg.qd, "qd", 8, fmt.Sprintf("the sequential phase's requests in flight on its NFS connection (1 to %d)", benchNFSQDMax))
	f.IntVar(&cfg.runs, "runs", 1, "rounds of every client count and of the sequential phase; each line is the median")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cfg.dir = args[0]
		if err := cfg.check(); err != nil {
			return err
		}
		if err := checkBenchDir(c, cfg.dir); err != nil {
			return err
		}
		return runBenchNFS(cmd.Context(), os.Stdout, cfg)
	}
	return c
}

// check reports the first flag out of its bounds.
func (cfg *benchNFSConfig) check() error {
	if cfg.gateway == "" {
		return errors.New("bench nfs: --gateway HOST:PORT is required")
	}
	if _, _, err := splitHostPort(cfg.gateway); err != nil {
		return fmt.Errorf("bench nfs: --gateway: %w", err)
	}
	cfg.export = strings.Trim(cfg.export, "/")
	if cfg.export == "" {
		return errors.New("bench nfs: --export names no export")
	}
	if len(cfg.clients) == 0 {
		return errors.New("bench nfs: --clients names no client count")
	}
	for _, n := range cfg.clients {
		if n < 1 || n > benchNFSClientsMax {
			return fmt.Errorf("bench nfs: --clients: %d is not 1 to %d", n, benchNFSClientsMax)
		}
	}
	if cfg.files < 1 || cfg.files > benchNFSFilesMax {
		return fmt.Errorf("bench nfs: --files: %d is not 1 to %d", cfg.files, benchNFSFilesMax)
	}
	if cfg.runs < 1 || cfg.runs > benchNFSRunsMax {
		return fmt.Errorf("bench nfs: --runs: %d is not 1 to %d", cfg.runs, benchNFSRunsMax)
	}
	n, err := parseBytes(cfg.seqSize)
	if err != nil || n < 0 || n > benchNFSSeqBytesMax {
		return fmt.Errorf("bench nfs: --seq-size: %q is not 0 to %s", cfg.seqSize, humanBytes(benchNFSSeqBytesMax))
	}
	cfg.seqBytes = n
	if cfg.qd < 1 || cfg.qd > benchNFSQDMax {
		return fmt.Errorf("bench nfs: --qd: %d is not 1 to %d", cfg.qd, benchNFSQDMax)
	}
	return nil
}

// createRun is one side's result for one client count in one run.
type createRun struct {
	opsPerSec   float64
	median, p99 time.Duration
	factor      float64 // requests per log write; factorUnknown without metrics
}

const factorUnknown = -1

// benchNFSSides are the two sides of each run, in the order they run.
var benchNFSSides = [2]struct{ prefix, factorUnit string }{
	{"nfs_create_c", "waits/log_write"},
	{"fuse_create_fsync_c", "fsyncs/log_write"},
}

// runBenchNFS runs every client count, then the sequential phase,
// cfg.runs times on both sides and prints the medians to w. What the runs
// made stays until every run is done (a removal's background work would
// slow the next run), then goes.
func runBenchNFS(ctx context.Context, w io.Writer, cfg benchNFSConfig) (err error) {
	rpc.DefaultReadTimeout = benchNFSCallTimeout
	stamp := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	fmt.Fprintf(cfg.log, "bench nfs: gateway %s export /%s, DIR %s; clients %v, %d files each; sequential %s, %d in flight; %d run(s)\n",
		cfg.gateway, cfg.export, cfg.dir, cfg.clients, cfg.files, humanBytes(cfg.seqBytes), cfg.qd, cfg.runs)
	var made []func() error
	defer func() {
		start := time.Now()
		for _, remove := range made {
			if rerr := remove(); rerr != nil && err == nil {
				err = fmt.Errorf("bench nfs: remove the runs' files: %w", rerr)
			}
		}
		fmt.Fprintf(cfg.log, "bench nfs: removed the runs' files in %v\n", time.Since(start).Round(time.Second))
	}()
	// creates[side][i] holds the runs of client count cfg.clients[i].
	var creates [2][][]createRun
	for s := range creates {
		creates[s] = make([][]createRun, len(cfg.clients))
	}
	var seqs []seqRun
	start := time.Now()
	for r := 1; r <= cfg.runs; r++ {
		for i, n := range cfg.clients {
			name := fmt.Sprintf("bench-nfs-%s-c%d-r%d", stamp, n, r)
			dir := filepath.Join(cfg.dir, name+"-fuse")
			made = append(made, func() error { return removeNFSTop(cfg, name, n) }, func() error { return os.RemoveAll(dir) })
			res, err := createRound(ctx, cfg, name, dir, n, r)
			if err != nil {
				return fmt.Errorf("bench nfs: run %d, %d clients: %w", r, n, err)
			}
			for s := range res {
				creates[s][i] = append(creates[s][i], res[s])
			}
		}
		if cfg.seqBytes > 0 {
			name := fmt.Sprintf("bench-nfs-%s-seq-r%d", stamp, r)
			dir := filepath.Join(cfg.dir, name+"-fuse")
			// No client directories: removeNFSTop removes the file with top.
			made = append(made, func() error { return removeNFSTop(cfg, name, 0) }, func() error { return os.RemoveAll(dir) })
			res, err := seqRound(ctx, cfg, name, dir)
			if err != nil {
				return fmt.Errorf("bench nfs: run %d, sequential: %w", r, err)
			}
			seqs = append(seqs, res)
			printSeqRun(cfg.log, r, res)
		}
	}
	fmt.Fprintf(cfg.log, "bench nfs: done in %v\n", time.Since(start).Round(time.Second))
	var med [2][]createRun
	for s := range creates {
		for _, runs := range creates[s] {
			med[s] = append(med[s], medianRun(runs))
		}
	}
	printBenchNFS(w, cfg.clients, med[0], med[1])
	if len(seqs) > 0 {
		printBenchNFSSeq(w, medianSeq(seqs))
	}
	return nil
}

// createRound runs n clients' creates of run r on both sides, NFS in the
// export's directory top, then DIR's in dir.
func createRound(ctx context.Context, cfg benchNFSConfig, top, dir string, n, r int) ([2]createRun, error) {
	sides := [2]func() (createRun, error){
		func() (createRun, error) { return nfsCreates(ctx, cfg, top, n) },
		func() (createRun, error) { return fuseCreates(ctx, cfg, dir, n) },
	}
	var res [2]createRun
	for s, run := range sides {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var err error
		if res[s], err = run(); err != nil {
			return res, err
		}
		printCreateRun(cfg.log, fmt.Sprintf("run %d: %s%d", r, benchNFSSides[s].prefix, n), benchNFSSides[s].factorUnit, res[s])
	}
	return res, nil
}

// printCreateRun prints one side's run as a progress line.
func printCreateRun(w io.Writer, what, factorUnit string, r createRun) {
	factor := "unknown"
	if r.factor != factorUnknown {
		factor = fsbench.FormatValue(r.factor) + " " + factorUnit
	}
	fmt.Fprintf(w, "bench nfs: %s %s ops/s, latency median %s us, p99 %s us, batching %s\n", what,
		fsbench.FormatValue(r.opsPerSec), fsbench.FormatValue(micros(r.median)), fsbench.FormatValue(micros(r.p99)), factor)
}

// printBenchNFS prints, per client count, the NFS side's lines, DIR's,
// and the ratio of their rates. A factor not measured has no line.
func printBenchNFS(w io.Writer, clients []int, nfs, fuse []createRun) {
	for i, n := range clients {
		for s, r := range [2]createRun{nfs[i], fuse[i]} {
			name := benchNFSSides[s].prefix + strconv.Itoa(n)
			for _, l := range []fsbench.Result{
				{Name: name, Value: r.opsPerSec, Unit: "ops/s"},
				{Name: name + "_latency", Value: micros(r.median), Unit: "us"},
				{Name: name + "_latency_p99", Value: micros(r.p99), Unit: "us"},
			} {
				fmt.Fprintln(w, l)
			}
			if r.factor != factorUnknown {
				fmt.Fprintln(w, fsbench.Result{Name: name + "_batching", Value: r.factor, Unit: benchNFSSides[s].factorUnit})
			}
		}
		fmt.Fprintf(w, "%s%d_ratio %.3f %s\n", benchNFSSides[0].prefix, n, nfs[i].opsPerSec/fuse[i].opsPerSec, ratioUnit("ops/s"))
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median is the middle of v's values (of an odd count, the middle
// value; of an even one, the lower middle); it sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// medianRun is each field's median over runs. Runs without a factor do
// not count for the factor's.
func medianRun(runs []createRun) createRun {
	pick := func(v []float64) float64 {
		if len(v) == 0 {
			return factorUnknown
		}
		return median(v)
	}
	var ops, med, p99, factor []float64
	for _, r := range runs {
		ops = append(ops, r.opsPerSec)
		med = append(med, float64(r.median))
		p99 = append(p99, float64(r.p99))
		if r.factor != factorUnknown {
			factor = append(factor, r.factor)
		}
	}
	return createRun{opsPerSec: pick(ops), median: time.Duration(pick(med)), p99: time.Duration(pick(p99)), factor: pick(factor)}
}

// quantileDuration is the q-quantile of sorted by nearest rank.
func quantileDuration(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// runClients runs n clients at once, each calling op(i) for i in
// [0, files) and timing each call, and returns the calls per second of
// them all and the latencies' median and 99th percentile. The clients
// start together; the first error stops every client at its next call.
func runClients(n, files int, op func(client, i int) error) (createRun, error) {
	lat := make([][]time.Duration, n)
	errs := make([]error, n)
	var failed sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			lat[c] = make([]time.Duration, 0, files)
			for i := range files {
				select {
				case <-stop:
					return
				default:
				}
				t := time.Now()
				if err := op(c, i); err != nil {
					errs[c] = fmt.Errorf("client %d, file %d: %w", c, i, err)
					failed.Do(func() { close(stop) })
					return
				}
				lat[c] = append(lat[c], time.Since(t))
			}
		}()
	}
	start := time.Now()
	close(begin)
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return createRun{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return createRun{opsPerSec: float64(len(all)) / elapsed.Seconds(),
		median: quantileDuration(all, 0.5), p99: quantileDuration(all, 0.99), factor: factorUnknown}, nil
}

// nfsConn is one client's connection to the export.
type nfsConn struct {
	mount  *nfsc.Mount
	target *nfsc.Target
	auth   rpc.Auth
}

func dialNFS(addr, export string) (*nfsConn, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cl, err := nfsc.DialServiceAtPort(host, port)
	if err != nil {
		return nil, fmt.Errorf("connect to the gateway at %s: %w", addr, err)
	}
	auth := rpc.AuthUnix{Uid: 0, Gid: 0, GidLen: 1, Machinename: "plumeria-bench"}.Auth()
	m := &nfsc.Mount{Client: cl}
	tg, err := m.Mount("/"+export, auth)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("mount /%s from %s: %w", export, addr, err)
	}
	return &nfsConn{mount: m, target: tg, auth: auth}, nil
}

func (c *nfsConn) close() {
	c.mount.Unmount()
	c.target.Close()
}

// create sends one GUARDED CREATE of name in the directory of handle dir
// (mode 0644), as open(O_CREAT|O_EXCL) does: one call, no LOOKUP.
func (c *nfsConn) create(dir []byte, name string) error {
	type how struct {
		Mode uint32 // 1: GUARDED
		Attr nfsc.Sattr3
	}
	return c.call(&struct {
		rpc.Header
		Where nfsc.Diropargs3
		How   how
	}{c.header(nfsc.NFSProc3Create), nfsc.Diropargs3{FH: dir, Filename: name},
		how{Mode: 1, Attr: nfsc.Sattr3{Mode: nfsc.SetMode{SetIt: true, Mode: 0o644}}}})
}

// remove sends one REMOVE of name in the directory of handle dir.
func (c *nfsConn) remove(dir []byte, name string) error {
	return c.call(&struct {
		rpc.Header
		Object nfsc.Diropargs3
	}{c.header(nfsc.NFSProc3Remove), nfsc.Diropargs3{FH: dir, Filename: name}})
}

func (c *nfsConn) header(proc uint32) rpc.Header {
	return rpc.Header{Rpcvers: 2, Prog: nfsc.Nfs3Prog, Vers: nfsc.Nfs3Vers, Proc: proc, Cred: c.auth, Verf: rpc.AuthNull}
}

// call sends args and returns the NFS status of the reply as an error.
func (c *nfsConn) call(args any) error {
	res, err := c.target.Call(args)
	if err != nil {
		return err
	}
	st, err := xdr.ReadUint32(res)
	if err != nil {
		return err
	}
	return nfsc.NFS3Error(st)
}

// nfsCreates runs n NFS clients creating files in top/c<i> of the export,
// one connection each.
func nfsCreates(ctx context.Context, cfg benchNFSConfig, top string, n int) (createRun, error) {
	setup, err := dialNFS(cfg.gateway, cfg.export)
	if err != nil {
		return createRun{}, err
	}
	defer setup.close()
	if _, err := setup.target.Mkdir(top, 0o755); err != nil {
		return createRun{}, fmt.Errorf("nfs mkdir /%s/%s: %w (a squashed root may not write there: run the gateway with --no-root-squash)", cfg.export, top, err)
	}
	conns := make([]*nfsConn, n)
	dirs := make([][]byte, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for c := range n {
		if conns[c], err = dialNFS(cfg.gateway, cfg.export); err != nil {
			return createRun{}, err
		}
		if dirs[c], err = conns[c].target.Mkdir(fmt.Sprintf("%s/c%d", top, c), 0o755); err != nil {
			return createRun{}, fmt.Errorf("nfs mkdir %s/c%d: %w", top, c, err)
		}
	}
	before, err := scrapeFactor(ctx, cfg.gatewayMetrics, metricDurableWaits)
	if err != nil {
		return createRun{}, err
	}
	res, err := runClients(n, cfg.files, func(c, i int) error { return conns[c].create(dirs[c], benchFileName(i)) })
	if err != nil {
		return createRun{}, fmt.Errorf("nfs create: %w", err)
	}
	after, err := scrapeFactor(ctx, cfg.gatewayMetrics, metricDurableWaits)
	if err != nil {
		return createRun{}, err
	}
	res.factor = after.factorSince(before)
	return res, nil
}

// removeNFSTop removes what nfsCreates made in top with n clients, or
// began to: each client its own directory's files, all at once, on a
// connection of its own.
func removeNFSTop(cfg benchNFSConfig, top string, n int) error {
	setup, err := dialNFS(cfg.gateway, cfg.export)
	if err != nil {
		return err
	}
	defer setup.close()
	if _, _, err := setup.target.Lookup(top); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	conns := make([]*nfsConn, n)
	dirs := make([][]byte, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for c := range n {
		if conns[c], err = dialNFS(cfg.gateway, cfg.export); err != nil {
			return err
		}
		_, dirs[c], err = conns[c].target.Lookup(fmt.Sprintf("%s/c%d", top, c))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("nfs lookup %s/c%d: %w", top, c, err)
		}
	}
	_, err = runClients(n, cfg.files, func(c, i int) error {
		if dirs[c] == nil {
			return nil
		}
		if err := conns[c].remove(dirs[c], benchFileName(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nfs remove: %w", err)
	}
	if err := setup.target.RemoveAll(top); err != nil {
		return fmt.Errorf("nfs remove /%s/%s: %w", cfg.export, top, err)
	}
	return nil
}

// fuseCreates runs n goroutines creating files in top/c<i>, each with
// open(O_CREAT|O_EXCL), fsync and close.
func fuseCreates(ctx context.Context, cfg benchNFSConfig, top string, n int) (createRun, error) {
	for c := range n {
		if err := os.MkdirAll(filepath.Join(top, "c"+strconv.Itoa(c)), 0o755); err != nil {
			return createRun{}, err
		}
	}
	before, err := scrapeFactor(ctx, cfg.mountMetrics, metricFuseOps, `op="fsync"`)
	if err != nil {
		return createRun{}, err
	}
	res, err := runClients(n, cfg.files, func(c, i int) error {
		f, err := os.OpenFile(filepath.Join(top, "c"+strconv.Itoa(c), benchFileName(i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return createRun{}, err
	}
	after, err := scrapeFactor(ctx, cfg.mountMetrics, metricFuseOps, `op="fsync"`)
	if err != nil {
		return createRun{}, err
	}
	res.factor = after.factorSince(before)
	return res, nil
}

// seqRun is one run's sequential throughputs, in MiB/s.
type seqRun struct {
	nfsWrite, nfsRead, fuseWrite, fuseRead float64
}

// benchSeqFileName is the sequential phase's file, in its run's directory.
const benchSeqFileName = "seq"

// seqRound runs the sequential phase on both sides, NFS in the export's
// directory top, then DIR's in dir, with the same bytes.
func seqRound(ctx context.Context, cfg benchNFSConfig, top, dir string) (seqRun, error) {
	seed := rand.Uint64()
	var r seqRun
	var err error
	if r.nfsWrite, r.nfsRead, err = nfsSeq(ctx, cfg, top, seed); err != nil {
		return r, err
	}
	if r.fuseWrite, r.fuseRead, err = fuseSeq(ctx, dir, cfg.seqBytes, seed); err != nil {
		return r, err
	}
	return r, nil
}

// nfsSeq writes a file of cfg.seqBytes in the export's directory top and
// reads it back, on one connection with cfg.qd requests in flight, and
// returns the MiB/s of each. The write's time ends with the COMMIT's
// reply; a WRITE whose verifier is not the COMMIT's fails it.
func nfsSeq(ctx context.Context, cfg benchNFSConfig, top string, seed uint64) (write, read float64, err error) {
	setup, err := dialNFS(cfg.gateway, cfg.export)
	if err != nil {
		return 0, 0, err
	}
	defer setup.close()
	dir, err := setup.target.Mkdir(top, 0o755)
	if err != nil {
		return 0, 0, fmt.Errorf("nfs mkdir /%s/%s: %w (a squashed root may not write there: run the gateway with --no-root-squash)", cfg.export, top, err)
	}
	c, err := nfs.Dial(cfg.gateway, 0, 0, benchNFSCallTimeout)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	fh, err := c.CreateGuarded(dir, benchSeqFileName)
	if err != nil {
		return 0, 0, fmt.Errorf("nfs %s/%s: %w", top, benchSeqFileName, err)
	}
	bufs := make([][]byte, cfg.qd)
	for w := range bufs {
		bufs[w] = make([]byte, benchNFSChunkBytes)
	}
	verfs := make([]uint64, (cfg.seqBytes+benchNFSChunkBytes-1)/benchNFSChunkBytes)
	start := time.Now()
	err = runPipelined(ctx, cfg.seqBytes, cfg.qd, func(w int, off int64, n int) error {
		p := bufs[w][:n]
		fillPattern(p, seed, off)
		v, err := c.WriteUnstable(fh, uint64(off), p)
		verfs[off/benchNFSChunkBytes] = v
		return err
	})
	if err == nil {
		var commit uint64
		if commit, err = c.Commit(fh); err == nil {
			err = checkVerifiers(verfs, commit)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("nfs sequential write: %w", err)
	}
	write = mibPerSec(cfg.seqBytes, time.Since(start))
	start = time.Now()
	err = runPipelined(ctx, cfg.seqBytes, cfg.qd, func(w int, off int64, n int) error {
		got, err := c.Read(fh, uint64(off), n)
		if err != nil {
			return err
		}
		return checkPattern(got, bufs[w][:n], seed, off)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("nfs sequential read: %w", err)
	}
	return write, mibPerSec(cfg.seqBytes, time.Since(start)), nil
}

// fuseSeq writes a file of size bytes in dir (write(2)s of
// benchNFSChunkBytes, fsync, close) and reads it back (read(2)s to the
// end, one at a time: the kernel reads ahead), and returns the MiB/s of
// each; the opens are not timed.
func fuseSeq(ctx context.Context, dir string, size int64, seed uint64) (write, read float64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	name := filepath.Join(dir, benchSeqFileName)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, 0, err
	}
	buf := make([]byte, benchNFSChunkBytes)
	start := time.Now()
	for off := int64(0); off < size && err == nil; off += benchNFSChunkBytes {
		p := buf[:min(benchNFSChunkBytes, size-off)]
		fillPattern(p, seed, off)
		if err = ctx.Err(); err == nil {
			_, err = f.Write(p)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("sequential write of %s: %w", name, err)
	}
	write = mibPerSec(size, time.Since(start))
	if read, err = fuseSeqRead(ctx, name, size, seed); err != nil {
		return 0, 0, fmt.Errorf("sequential read of %s: %w", name, err)
	}
	return write, read, nil
}

// fuseSeqRead reads file name to its end, checks that it holds size bytes
// of the pattern of seed, and returns the MiB/s.
func fuseSeqRead(ctx context.Context, name string, size int64, seed uint64) (float64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	got, want := make([]byte, benchNFSChunkBytes), make([]byte, benchNFSChunkBytes)
	start := time.Now()
	for off := int64(0); off < size; off += benchNFSChunkBytes {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n := min(benchNFSChunkBytes, size-off)
		if _, err := io.ReadFull(f, got[:n]); err != nil {
			return 0, fmt.Errorf("at %d: %w", off, err)
		}
		if err := checkPattern(got[:n], want[:n], seed, off); err != nil {
			return 0, err
		}
	}
	if n, _ := f.Read(got[:1]); n != 0 {
		return 0, fmt.Errorf("longer than the %d bytes written", size)
	}
	return mibPerSec(size, time.Since(start)), nil
}

// runPipelined calls op(w, off, n) for each piece of [0, size) of
// benchNFSChunkBytes (the last one shorter), in order of off, from qd
// goroutines w = 0..qd-1, so that up to qd calls are under way at once.
// After the first error (or ctx's end) no call starts; it returns the
// errors.
func runPipelined(ctx context.Context, size int64, qd int, op func(w int, off int64, n int) error) error {
	var next atomic.Int64
	var stop atomic.Bool
	errs := make([]error, qd+1)
	var wg sync.WaitGroup
	for w := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				off := next.Add(benchNFSChunkBytes) - benchNFSChunkBytes
				if off >= size {
					return
				}
				if err := op(w, off, int(min(benchNFSChunkBytes, size-off))); err != nil {
					errs[w] = err
					stop.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if next.Load() < size {
		errs[qd] = ctx.Err()
	}
	return errors.Join(errs...)
}

// fillPattern fills b with the bytes at off of the sequential phase's
// file of seed: a PCG stream seeded with seed and off, so each chunk
// written or read at off has its own.
func fillPattern(b []byte, seed uint64, off int64) {
	r := rand.NewPCG(seed, uint64(off))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], r.Uint64())
		copy(b[i:], t[:])
	}
}

// checkPattern compares got, read at off, with fillPattern's bytes (made
// in scratch, of got's length).
func checkPattern(got, scratch []byte, seed uint64, off int64) error {
	fillPattern(scratch, seed, off)
	if bytes.Equal(got, scratch) {
		return nil
	}
	i := 0
	for got[i] == scratch[i] {
		i++
	}
	return fmt.Errorf("byte %d of the file is %#02x, want %#02x", off+int64(i), got[i], scratch[i])
}

// checkVerifiers reports a WRITE whose verifier (writes[i], of chunk i)
// is not the COMMIT's: the gateway may have lost that UNSTABLE data, and
// a client would have to send it again.
func checkVerifiers(writes []uint64, commit uint64) error {
	for i, v := range writes {
		if v != commit {
			return fmt.Errorf("the WRITE at %d had write verifier %#x, the COMMIT %#x: the gateway may have lost unstable data, which a client would have to send again",
				int64(i)*benchNFSChunkBytes, v, commit)
		}
	}
	return nil
}

func mibPerSec(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// benchNFSSeqNames name seqRun's fields in the output, in its order.
var benchNFSSeqNames = [4]string{"nfs_seq_write", "nfs_seq_read", "fuse_seq_write_fsync", "fuse_seq_read"}

func (r seqRun) values() [4]float64 {
	return [4]float64{r.nfsWrite, r.nfsRead, r.fuseWrite, r.fuseRead}
}

// medianSeq is each field's median over runs.
func medianSeq(runs []seqRun) seqRun {
	var v [4][]float64
	for _, r := range runs {
		for i, x := range r.values() {
			v[i] = append(v[i], x)
		}
	}
	return seqRun{nfsWrite: median(v[0]), nfsRead: median(v[1]), fuseWrite: median(v[2]), fuseRead: median(v[3])}
}

// printSeqRun prints run r's sequential phase as a progress line.
func printSeqRun(w io.Writer, r int, res seqRun) {
	var parts []string
	for i, v := range res.values() {
		parts = append(parts, benchNFSSeqNames[i]+" "+fsbench.FormatValue(v)+" MiB/s")
	}
	fmt.Fprintf(w, "bench nfs: run %d: %s (reads may come from the data cache of the fs node that wrote: the gateway's, the mount's)\n",
		r, strings.Join(parts, ", "))
}

// printBenchNFSSeq prints the sequential phase's lines and the ratios of
// NFS's rates over DIR's.
func printBenchNFSSeq(w io.Writer, r seqRun) {
	for i, v := range r.values() {
		fmt.Fprintln(w, fsbench.Result{Name: benchNFSSeqNames[i], Value: v, Unit: "MiB/s"})
	}
	fmt.Fprintf(w, "nfs_seq_write_ratio %.3f %s\n", r.nfsWrite/r.fuseWrite, ratioUnit("MiB/s"))
	fmt.Fprintf(w, "nfs_seq_read_ratio %.3f %s\n", r.nfsRead/r.fuseRead, ratioUnit("MiB/s"))
}

func benchFileName(i int) string { return fmt.Sprintf("f%06d", i) }

// factorCounts are a fs node's counts of requests that waited for its
// redo log and of the log's writes, at one moment; ok is false when they
// were not read.
type factorCounts struct {
	waits, writes float64
	ok            bool
}

// factorSince is the batching factor between then and c: requests per
// log write.
func (c factorCounts) factorSince(then factorCounts) float64 {
	if !c.ok || !then.ok || c.writes <= then.writes {
		return factorUnknown
	}
	return (c.waits - then.waits) / (c.writes - then.writes)
}

// scrapeFactor reads the requests (metric waits, in the series with
// every label of labels) and log writes from the /metrics at addr; with
// no addr, it reads nothing.
func scrapeFactor(ctx context.Context, addr, waits string, labels ...string) (factorCounts, error) {
	if addr == "" {
		return factorCounts{}, nil
	}
	text, err := fetchMetrics(ctx, addr)
	if err != nil {
		return factorCounts{}, err
	}
	c := factorCounts{ok: true}
	var found bool
	if c.waits, found = metricSum(text, waits, labels...); !found && len(labels) == 0 {
		return factorCounts{}, fmt.Errorf("%s/metrics has no %s: not an NFS gateway?", addr, waits)
	}
	if c.writes, found = metricSum(text, metricLogWrites); !found {
		return factorCounts{}, fmt.Errorf("%s/metrics has no %s: no file system served there?", addr, metricLogWrites)
	}
	return c, nil
}

func fetchMetrics(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, benchMetricsTimeout)
	defer cancel()
	scheme, client := "http", http.DefaultClient
	if id := pki.Default(); id != nil {
		// HTTPS with the admin certificate; the port is any member's.
		scheme, client = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: id.ClientConfigFor(pki.Roles...)}}
	}
	url := scheme + "://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("read metrics from %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return string(b), err
}

// metricSum adds the values of every sample of metric name, in
// Prometheus's text format, whose labels include each of labels (written
// as in the text: op="fsync"). found says whether any sample matched.
func metricSum(text, name string, labels ...string) (sum float64, found bool) {
	s := bufio.NewScanner(strings.NewReader(text))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := s.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		var lbls string
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		}
		if !hasLabels(lbls, labels) {
			continue
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	return sum, found
}

// hasLabels reports whether the label list lbls (a="x",b="y") holds each
// of want.
func hasLabels(lbls string, want []string) bool {
	for _, w := range want {
		i := strings.Index(lbls, w)
		if i < 0 || (i > 0 && lbls[i-1] != ',') || (i+len(w) < len(lbls) && lbls[i+len(w)] != ',') {
			return false
		}
	}
	return true
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: not a port", p)
	}
	return host, port, nil
}

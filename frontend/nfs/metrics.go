package nfs

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumeria-fs/plumeria/filesys/redo"
	"github.com/plumeria-fs/plumeria/internal/prom"
)

// The gateway's metrics (docs/operations.md, Metrics).
var (
	nfsSecondsOpts = prometheus.HistogramOpts{Name: "plumeria_nfs_op_seconds",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		Help:    "Time NFS and MOUNT procedures took in the gateway, from the decoded call to the encoded reply, by procedure (failed ones too)."}
	nfsErrorsOpts = prometheus.CounterOpts{Name: "plumeria_nfs_op_errors_total",
		Help: "NFS procedures answered with an error status, by procedure and status (NFS3ERR_NOENT from lookup is routine)."}
	nfsDurableOpts = prometheus.CounterOpts{Name: "plumeria_nfs_durable_waits_total",
		Help: "Requests that waited for the redo log before their reply (metadata changes, stable WRITEs, COMMITs)."}
	nfsRefusedOpts = prometheus.CounterOpts{Name: "plumeria_nfs_refused_connections_total",
		Help: "Connections from clients outside --allow (every call on them is refused)."}
	nfsMalformedOpts = prometheus.CounterOpts{Name: "plumeria_nfs_malformed_requests_total",
		Help: "Requests dropped or refused because they did not decode or were too large."}
	nfsVerifierOpts = prometheus.CounterOpts{Name: "plumeria_nfs_verifier_changes_total",
		Help: "Times the write verifier changed because unstable data may have been lost (clients resend it)."}
	nfsDuplicateOpts = prometheus.CounterOpts{Name: "plumeria_nfs_duplicate_requests_total",
		Help: "Changes sent again by a client (same xid) answered from the duplicate request cache or dropped while the first ran."}
	nfsBatchingOpts = prometheus.GaugeOpts{Name: "plumeria_nfs_group_commit_factor",
		Help: "Requests that waited for the redo log per log write since the gateway mounted the file system (Calaveras' batching factor, for the NFS requests)."}
)

type metrics struct {
	seconds         *prometheus.HistogramVec
	errors          *prometheus.CounterVec
	syncs           prometheus.Counter
	syncN           atomic.Uint64 // syncs' value, for the batching factor
	refused         prometheus.Counter
	malformed       prometheus.Counter
	verifierChanges prometheus.Counter
	duplicates      prometheus.Counter
}

// logStats is implemented by *filesys.FS: the redo log's counters.
type logStats interface{ LogStats() redo.Stats }

func newMetrics(r prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		seconds:         prom.Shared(r, prometheus.NewHistogramVec(nfsSecondsOpts, []string{"op"})),
		errors:          prom.Shared(r, prometheus.NewCounterVec(nfsErrorsOpts, []string{"op", "status"})),
		syncs:           prom.Shared(r, prometheus.NewCounter(nfsDurableOpts)),
		refused:         prom.Shared(r, prometheus.NewCounter(nfsRefusedOpts)),
		malformed:       prom.Shared(r, prometheus.NewCounter(nfsMalformedOpts)),
		verifierChanges: prom.Shared(r, prometheus.NewCounter(nfsVerifierOpts)),
		duplicates:      prom.Shared(r, prometheus.NewCounter(nfsDuplicateOpts)),
	}
	prom.Shared(r, prometheus.NewGaugeFunc(nfsBatchingOpts, func() float64 {
		b := s.fsys.Load()
		ls, ok := b.fs.(logStats)
		if !ok {
			return 0
		}
		writes := ls.LogStats().Batches - b.logWrites0
		if writes == 0 {
			return 0
		}
		return float64(m.syncN.Load()-b.waits0) / float64(writes)
	}))
	return m
}

// durableWait counts one request that waits for the log.
func (m *metrics) durableWait() {
	m.syncs.Inc()
	m.syncN.Add(1)
}

// done records procedure op, answered with status st after d.
func (m *metrics) done(op string, st uint32, d time.Duration) {
	m.seconds.WithLabelValues(op).Observe(d.Seconds())
	if st != nfsOK && st != statusGarbage && op != "mount_mnt" {
		m.errors.WithLabelValues(op, statusName(st)).Inc()
	}
}

var statusNames = map[uint32]string{
	nfsErrPerm: "NFS3ERR_PERM", nfsErrNoEnt: "NFS3ERR_NOENT", nfsErrIO: "NFS3ERR_IO", nfsErrAcces: "NFS3ERR_ACCES",
	nfsErrExist: "NFS3ERR_EXIST", nfsErrXDev: "NFS3ERR_XDEV", nfsErrDQuot: "NFS3ERR_DQUOT", nfsErrNotDir: "NFS3ERR_NOTDIR", nfsErrIsDir: "NFS3ERR_ISDIR",
	nfsErrInval: "NFS3ERR_INVAL", nfsErrFBig: "NFS3ERR_FBIG", nfsErrNoSpc: "NFS3ERR_NOSPC", nfsErrROFS: "NFS3ERR_ROFS",
	nfsErrMLink: "NFS3ERR_MLINK", nfsErrNameTooLng: "NFS3ERR_NAMETOOLONG", nfsErrNotEmpty: "NFS3ERR_NOTEMPTY",
	nfsErrStale: "NFS3ERR_STALE", nfsErrBadHandle: "NFS3ERR_BADHANDLE", nfsErrNotSync: "NFS3ERR_NOT_SYNC",
	nfsErrBadCookie: "NFS3ERR_BAD_COOKIE", nfsErrNotSupp: "NFS3ERR_NOTSUPP", nfsErrTooSmall: "NFS3ERR_TOOSMALL",
	nfsErrServerFlt: "NFS3ERR_SERVERFAULT", nfsErrBadType: "NFS3ERR_BADTYPE", nfsErrJukebox: "NFS3ERR_JUKEBOX",
}

func statusName(st uint32) string {
	if n, ok := statusNames[st]; ok {
		return n
	}
	return strconv.FormatUint(uint64(st), 10)
}

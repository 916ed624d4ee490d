package telemetry

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The metrics, in one registry of the process's own (not Prometheus's
// default one, which an application embedding the SDK may use for its
// own).
var (
	registry = prometheus.NewRegistry()
	metrics  *metricSet
)

// init makes the metrics once every variable they use is set (the
// collectors' descriptions among them).
func init() { metrics = newMetrics() }

// Metric names, as Prometheus shows them.
const (
	MetricSessions           = "ipybox_sessions"
	MetricKernels            = "ipybox_kernels"
	MetricCells              = "ipybox_cells_total"
	MetricCellSeconds        = "ipybox_cell_duration_seconds"
	MetricToolCalls          = "ipybox_tool_calls_total"
	MetricToolSeconds        = "ipybox_tool_call_duration_seconds"
	MetricApprovals          = "ipybox_approvals_total"
	MetricApprovalSeconds    = "ipybox_approval_wait_seconds"
	MetricEgress             = "ipybox_egress_decisions_total"
	MetricKernelStarts       = "ipybox_kernel_starts_total"
	MetricKernelStartSeconds = "ipybox_kernel_start_duration_seconds"
	MetricKernelDeaths       = "ipybox_kernel_deaths_total"
	MetricKernelMemory       = "ipybox_kernel_memory_bytes"
	MetricSpillBytes         = "ipybox_spill_bytes_total"
	MetricImageBytes         = "ipybox_image_bytes_total"
)

// Session and kernel states, the state label. Hibernated comes with
// durable sessions.
const (
	StateActive = "active"
	StatePooled = "pooled"
	// StateHibernated is a session whose state is saved and which holds
	// no kernel until its next call.
	StateHibernated = "hibernated"
)

type metricSet struct {
	cells              *prometheus.CounterVec
	cellSeconds        prometheus.Histogram
	toolCalls          *prometheus.CounterVec
	toolSeconds        *prometheus.HistogramVec
	approvals          *prometheus.CounterVec
	approvalSeconds    *prometheus.HistogramVec
	egress             *prometheus.CounterVec
	kernelStarts       *prometheus.CounterVec
	kernelStartSeconds *prometheus.HistogramVec
	kernelDeaths       *prometheus.CounterVec
	spillBytes         prometheus.Counter
	imageBytes         prometheus.Counter
}

// latency are the buckets of cells, tool calls and approval waits: from
// a millisecond (a `pass` cell, a trivial tool) to ten minutes.
var latency = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func newMetrics() *metricSet {
	m := &metricSet{
		cells: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCells,
			Help: "Cells run, by outcome (ok, error: a Python exception, timeout, kernel_died, cancelled, failed)."}, []string{"outcome"}),
		cellSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricCellSeconds,
			Help: "Time from a cell's start to its result, approval waits included.", Buckets: latency}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricToolCalls,
			Help: "MCP tool calls made by kernel code, by registered server and outcome (ok, is_error: a result with isError, rejected, approval_timeout, timeout, tool_error: no result, ...)."}, []string{"server", "outcome"}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricToolSeconds,
			Help: "Time of a tool call from kernel code, from the tool server's view: its approval wait and the MCP server's answer.", Buckets: latency}, []string{"server"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricApprovals,
			Help: "Approval decisions on tool calls and shell commands, by kind and decision (allow, deny, timeout, abandoned)."}, []string{"kind", "decision"}),
		approvalSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricApprovalSeconds,
			Help: "Time an approval took to decide: a policy rule at once, a person as long as they take.", Buckets: latency}, []string{"kind"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricEgress,
			Help: "Connections the egress proxy of sandboxes and containers allowed or denied."}, []string{"decision"}),
		kernelStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricKernelStarts,
			Help: "Kernel process starts, by backend (local, zygote, sandbox, container, gateway), kind (start, restart) and outcome (ok, error)."}, []string{"backend", "kind", "outcome"}),
		kernelStartSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricKernelStartSeconds,
			Help:    "Time of a successful kernel process start, to ready with its init code run, by backend.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60}}, []string{"backend"}),
		kernelDeaths: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricKernelDeaths,
			Help: "Kernel processes that ended by themselves (not closed by ipybox), by backend."}, []string{"backend"}),
		spillBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricSpillBytes,
			Help: "Bytes of cell output that ipybox mcp wrote to the workspace's ipybox-outputs files."}),
		imageBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricImageBytes,
			Help: "Bytes of images that cells produced and ipybox saved to the images folder."}),
	}
	registry.MustRegister(m.cells, m.cellSeconds, m.toolCalls, m.toolSeconds,
		m.approvals, m.approvalSeconds, m.egress, m.kernelStarts, m.kernelStartSeconds,
		m.kernelDeaths, m.spillBytes, m.imageBytes, stateCollector{},
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	return m
}

// Handler serves the process's metrics in Prometheus's text (or protobuf)
// exposition format. It checks no token: mcpserver puts it behind the
// same bearer token as its MCP endpoint.
func Handler() http.Handler {
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
}

// Gatherer returns the registry, for tests and for an application that
// merges ipybox's metrics into its own (prometheus.Gatherers).
func Gatherer() prometheus.Gatherer { return registry }

// sessionSources report the open sessions of each MCP server of the
// process, asked at each scrape.
var sessionSources sync.Map // *int (a key of its own) -> func() (active, hibernated int)

// Sessions reports the open sessions of an MCP server, active and
// hibernated (open, asked at each scrape), until remove.
func Sessions(open func() (active, hibernated int)) (remove func()) {
	key := new(int)
	sessionSources.Store(key, open)
	return func() { sessionSources.Delete(key) }
}

// AddSpillBytes counts bytes written to an output spill file.
func AddSpillBytes(n int) { metrics.spillBytes.Add(float64(n)) }

// AddImageBytes counts bytes of a saved image.
func AddImageBytes(n int) { metrics.imageBytes.Add(float64(n)) }

// stateCollector reports, at each scrape, the kernels by state and the
// memory of each kernel whose backend has a process on this host.
type stateCollector struct{}

var (
	sessionsDesc = prometheus.NewDesc(MetricSessions,
		"MCP sessions of ipybox mcp by state: active (open: a handle of create_session, or a connection's implicit session; its kernel starts at its first cell) or hibernated (its state saved, no kernel until its next call).", []string{"state"}, nil)
	kernelsDesc = prometheus.NewDesc(MetricKernels,
		"Kernel processes by state: pooled (kept ready for new sessions) and active (the others that are up).", []string{"state"}, nil)
	memoryDesc = prometheus.NewDesc(MetricKernelMemory,
		"Resident memory of a kernel and the processes it started (local, zygote, sandbox and container kernels; a gateway's are not on this host).",
		[]string{"backend", "session"}, nil)
)

// The registry reads Describe's and Collect's channel while they run:
// their sends wait for nothing else.
func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc // bound: the registry drains ch
	ch <- kernelsDesc  // bound: the registry drains ch
	ch <- memoryDesc   // bound: the registry drains ch
}

func (stateCollector) Collect(ch chan<- prometheus.Metric) {
	active, hibernated := 0, 0
	sessionSources.Range(func(_, v any) bool {
		a, h := v.(func() (int, int))()
		active, hibernated = active+a, hibernated+h
		return true
	})
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(active), StateActive)         // bound: the registry drains ch
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(hibernated), StateHibernated) // bound: the registry drains ch
	up, ready := live.Load(), pooled()
	// A pooled kernel that died is still counted pooled until the pool
	// drops it: active is never shown below zero.
	// bound: the registry drains ch
	ch <- prometheus.MustNewConstMetric(kernelsDesc, prometheus.GaugeValue, float64(max(up-ready, 0)), StateActive)
	ch <- prometheus.MustNewConstMetric(kernelsDesc, prometheus.GaugeValue, float64(ready), StatePooled) // bound: the registry drains ch
	watched.Range(func(key, value any) bool {
		k, pid := key.(*Kernel), value.(func() int)
		if p := pid(); p > 0 {
			if rss, ok := treeRSS(p); ok {
				ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(rss), k.backend, k.session) // bound: the registry drains ch
			}
		}
		return true
	})
}

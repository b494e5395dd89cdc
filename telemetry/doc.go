// Package telemetry reports orthrus engines and switchers to
// OpenTelemetry: metrics an SRE can alert on, and a span per acquisition
// and release.
//
// One *Telemetry observes everything: give it to each engine
// (redis.WithObserver, etcd.WithObserver, zk.WithObserver,
// mem.WithObserver) and to the switcher (switcher.WithObserver), or to
// config.Open with config.WithMeterProvider / config.WithTracerProvider.
// It uses the OpenTelemetry API only; the application chooses the SDK and
// the exporter (Prometheus, OTLP). Without providers it uses the global
// ones, no-ops until the application sets them. An engine without an
// observer does no observation work at all.
//
// # Metrics
//
// Per engine (label engine, plus the one named):
//
//	orthrus.lock.acquisitions     counter    {acquisition} result: granted, contended, timeout, cancelled, unavailable, error
//	orthrus.lock.wait.duration    histogram  s             result (buckets 0.1 ms to 30 s, WaitBuckets)
//	orthrus.lock.hold.duration    histogram  s             end: released, lost (buckets 1 ms to 1 h, HoldBuckets)
//	orthrus.lock.holds            updown     {hold}        holds held now
//	orthrus.lock.waiters          updown     {waiter}      acquisitions waiting now
//	orthrus.lock.renewals         counter    {renewal}     result: ok, failed
//	orthrus.lock.lost             counter    {hold}        cause: expired, gone, lease_end, engine, closed
//	orthrus.lock.engine.errors    counter    {error}       operation: acquire, release, renew
//
// Per switcher (label switcher):
//
//	orthrus.switcher.acquisitions    counter    {acquisition} engine (the one that answered last), result
//	orthrus.switcher.wait.duration   histogram  s             result: the caller's wait across every engine tried
//	orthrus.switcher.switches        counter    {switch}      from, to, reason: breaker, manual, source, failback
//	orthrus.switcher.deferred        counter    {switch}      from, to: a source named an engine that is down here
//	orthrus.switcher.engine.current  gauge                    engine: 1 for the current engine, 0 for the others
//	orthrus.switcher.epoch           gauge                    the switch epoch
//	orthrus.switcher.breaker.state   gauge                    engine, state: closed, half_open, open (1 for the state it is in)
//	orthrus.switcher.retries         counter    {retry}       acquisitions that failed on an engine and went again
//
// Per election and run-once job (Telemetry.Jobs, given to elect.WithObserver
// and runonce.WithObserver; label engine, the engine or switcher they run on):
//
//	orthrus.elect.terms              counter    {term}        leaderships won
//	orthrus.elect.term.duration      histogram  s             end: resigned, lost
//	orthrus.elect.leading            updown     {term}        leaderships held now
//	orthrus.elect.campaign.duration  histogram  s             result: won, cancelled, error
//	orthrus.runonce.runs             counter    {run}         outcome: ran, skipped, failed, cut_short, error
//	orthrus.runonce.run.duration     histogram  s             outcome: ran, failed, cut_short
//
// Labels have bounded values: engine and switcher names, and the fixed
// sets above. Lock names are never labels unless WithLockNames maps them
// to a small set. Through a switcher, an acquisition is counted twice, in
// different metrics: per engine (each engine it tried; a wait a switch
// moved counts as cancelled on the engine it left) and per switcher (once,
// as the caller saw it). The Prometheus exporter names them
// orthrus_lock_wait_duration_seconds, orthrus_lock_acquisitions_total and
// so on.
//
// # Traces
//
// Each acquisition is a span "orthrus.lock.acquire" (kind client on an
// engine, internal through a switcher, whose engine attempts are its
// children) with the lock name, owner, result, engine and fencing token;
// each Unlock that frees a lock is a span "orthrus.lock.release"; a lost
// hold is a span "orthrus.lock.lost" with its cause; a switch is a span
// "orthrus.switch". An acquisition moved to another engine gets an event
// "orthrus.lock.moved" (from, to, epoch) and a link to the switch's span.
// A release span has no parent (Unlock takes no context): its token ties
// it to its acquisition. A span's attributes are set when it ends, in one
// write (each write takes the span's lock and may grow its attribute
// slice): a span processor's OnStart sees none.
//
// With every span sampled, traces cost more than the metrics: two SDK
// spans per Lock+Unlock cycle. The SDK's batching span processor wakes its
// goroutine for each span it is handed, which a machine with few idle cores
// feels most (BenchmarkLockUnlock measures it as sdk-batch). Where locks
// cycle fast, sample (sdktrace.TraceIDRatioBased) rather than record all.
//
// # What is not guaranteed
//
// Holds kept alive by the engine itself (etcd leases, ZooKeeper sessions)
// have no renewals of their own to count: a lease or session that fails
// shows as lost holds (orthrus.lock.lost, cause engine) and WARN logs. The holds and waiters counts are this process's. A
// wait moved by a switch that the switcher made through a shared source
// may find the switch's span not yet recorded: it gets the event, not the
// link.
package telemetry

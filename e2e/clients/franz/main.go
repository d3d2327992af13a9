// Command franz drives franz-go (github.com/twmb/franz-go, the Go Kafka
// client) for the client-compatibility suite (e2e/clients/test_franz.py).
//
// One JSON request on stdin, one JSON answer on stdout; franz-go's own log
// (info and above) goes to stderr. Bytes (keys, values, header values) are
// base64 in JSON and null stays null, so a null key and an empty one differ.
//
//	franz produce   {"bootstrap", "topic", "timeout_ms", "compression"?,
//	                 "records": [{"partition", "key", "value",
//	                              "headers": [[name, value], ...], "timestamp"}]}
//	  -> {"results": [{"partition", "offset", "producer_id", "producer_epoch", "error"}],
//	      "error"}
//	  franz-go's default producer: idempotent, acks=all; the records are
//	  produced in order with the manual partitioner and every ack awaited.
//	  Exit 0 when every record was acknowledged, 1 otherwise.
//
//	franz consume   {"bootstrap", "topic", "count", "timeout_ms",
//	                 "group"?, "partitions"?,
//	                 "fetch_max_bytes"?, "fetch_max_partition_bytes"?}
//	  -> {"records": [{"partition", "offset", "key", "value", "headers",
//	                   "timestamp", "timestamp_type", "producer_id"}],
//	      "fetch_requests", "session_resets", "errors", "error"}
//	  With "group": a group consumer subscribed to the topic from the start
//	  (no commits); else the topic's partitions 0..partitions-1 consumed
//	  directly from offset 0. Stops at "count" records (exit 0) or at the
//	  deadline (exit 3). franz-go uses fetch sessions by default;
//	  "fetch_requests" counts its Fetch requests answered, "session_resets"
//	  the times its log said a fetch session was reset or refused.
//
//	franz etl       {"bootstrap", "in", "out", "group", "transactional_id",
//	                 "count", "timeout_ms", "abort_first"?}
//	  -> {"committed", "aborted", "error"}
//	  franz-go's GroupTransactSession (exactly-once consume-transform-produce:
//	  a read_committed group consumer of "in", a transactional producer to
//	  "out" writing each value with an "x" prefix and the key unchanged, and
//	  the consumer's offsets committed with each transaction). With
//	  "abort_first" the first transaction that read anything is aborted (the
//	  session rewinds to the committed offsets). Stops once "count" records
//	  were committed (exit 0) or at the deadline (exit 3).
//
// Every connection goes to the bootstrap's host (the dialer refuses any
// other), and every run ends by timeout_ms plus a grace period at the latest.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// b64 is a nullable byte string: JSON null or base64.
type b64 []byte

func (b b64) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

func (b *b64) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*b = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	d, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	if d == nil {
		d = []byte{}
	}
	*b = d
	return nil
}

// header is [name, value] in JSON.
type header struct {
	Key   string
	Value b64
}

func (h header) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{h.Key, h.Value})
}

func (h *header) UnmarshalJSON(data []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(data, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("header: want [name, value], got %s", data)
	}
	if err := json.Unmarshal(pair[0], &h.Key); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &h.Value)
}

type record struct {
	Partition     int32    `json:"partition"`
	Offset        int64    `json:"offset"`
	Key           b64      `json:"key"`
	Value         b64      `json:"value"`
	Headers       []header `json:"headers"`
	Timestamp     int64    `json:"timestamp"`
	TimestampType string   `json:"timestamp_type,omitempty"`
	ProducerID    int64    `json:"producer_id"`
}

type produceRequest struct {
	Bootstrap   string   `json:"bootstrap"`
	Topic       string   `json:"topic"`
	TimeoutMs   int64    `json:"timeout_ms"`
	Compression string   `json:"compression"`
	Records     []record `json:"records"`
}

type produceResult struct {
	Partition     int32   `json:"partition"`
	Offset        int64   `json:"offset"`
	ProducerID    int64   `json:"producer_id"`
	ProducerEpoch int16   `json:"producer_epoch"`
	Error         *string `json:"error"`
}

type consumeRequest struct {
	Bootstrap              string `json:"bootstrap"`
	Topic                  string `json:"topic"`
	Count                  int    `json:"count"`
	TimeoutMs              int64  `json:"timeout_ms"`
	Group                  string `json:"group"`
	Partitions             int32  `json:"partitions"`
	FetchMaxBytes          int32  `json:"fetch_max_bytes"`
	FetchMaxPartitionBytes int32  `json:"fetch_max_partition_bytes"`
}

// grace after timeout_ms for closing the client before the watchdog exits.
const grace = 20 * time.Second

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "produce" && os.Args[1] != "consume" && os.Args[1] != "etl") {
		fmt.Fprintln(os.Stderr, "usage: franz produce|consume|etl < request.json")
		os.Exit(2)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(2, "reading stdin: %v", err)
	}
	switch os.Args[1] {
	case "produce":
		var req produceRequest
		if err := json.Unmarshal(in, &req); err != nil {
			fail(2, "produce request: %v", err)
		}
		os.Exit(produce(req))
	case "consume":
		var req consumeRequest
		if err := json.Unmarshal(in, &req); err != nil {
			fail(2, "consume request: %v", err)
		}
		os.Exit(consume(req))
	case "etl":
		var req etlRequest
		if err := json.Unmarshal(in, &req); err != nil {
			fail(2, "etl request: %v", err)
		}
		os.Exit(etl(req))
	}
}

type etlRequest struct {
	Bootstrap       string `json:"bootstrap"`
	In              string `json:"in"`
	Out             string `json:"out"`
	Group           string `json:"group"`
	TransactionalID string `json:"transactional_id"`
	Count           int    `json:"count"`
	TimeoutMs       int64  `json:"timeout_ms"`
	AbortFirst      bool   `json:"abort_first"`
}

// etl runs a GroupTransactSession until req.Count records were committed.
func etl(req etlRequest) int {
	timeout := timeoutOf(req.TimeoutMs)
	watchdog(timeout)
	log := &logger{}
	opts := append(clientOpts(req.Bootstrap, "moldau-e2e-franz-etl", log),
		kgo.TransactionalID(req.TransactionalID),
		kgo.TransactionTimeout(60*time.Second),
		kgo.ConsumerGroup(req.Group),
		kgo.ConsumeTopics(req.In),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		fail(2, "new session: %v", err)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	committed, aborted := 0, 0
	for committed < req.Count && ctx.Err() == nil {
		fs := sess.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
				continue
			}
			fail(1, "fetch %s[%d]: %v", e.Topic, e.Partition, e.Err)
		}
		n := fs.NumRecords()
		if n == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			fail(1, "begin: %v", err)
		}
		var out []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, &kgo.Record{Topic: req.Out, Key: r.Key, Value: append([]byte("x"), r.Value...)})
		})
		if err := sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
			fail(1, "produce: %v", err)
		}
		try := kgo.TryCommit
		if req.AbortFirst && aborted == 0 {
			try = kgo.TryAbort
		}
		ok, err := sess.End(ctx, try)
		if err != nil {
			fail(1, "end: %v", err)
		}
		switch {
		case ok:
			committed += n
		case try == kgo.TryAbort:
			aborted += n
		}
	}
	emit(map[string]any{"committed": committed, "aborted": aborted})
	if committed < req.Count {
		return 3
	}
	return 0
}

func fail(code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "franz:", msg)
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"error": msg})
	os.Exit(code)
}

func emit(v any) {
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "franz: writing the answer:", err)
		os.Exit(1)
	}
}

// watchdog ends the process if the run outlives its bound (a hung close).
func watchdog(timeout time.Duration) {
	time.AfterFunc(timeout+grace, func() {
		fmt.Fprintf(os.Stderr, "franz: still running %v after its %v timeout; exiting\n", grace, timeout)
		os.Exit(4)
	})
}

func timeoutOf(ms int64) time.Duration {
	if ms <= 0 {
		return 60 * time.Second
	}
	return time.Duration(ms) * time.Millisecond
}

// loopbackDialer dials only the bootstrap's host: the broker must advertise
// the address it was given, and nothing leaves the machine.
func loopbackDialer(bootstrap string) (func(ctx context.Context, network, host string) (net.Conn, error), error) {
	want, _, err := net.SplitHostPort(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("bootstrap %q: %v", bootstrap, err)
	}
	if ip := net.ParseIP(want); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("bootstrap %q is not a loopback address", bootstrap)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != want {
			fmt.Fprintf(os.Stderr, "franz: refusing to dial %q (only %s)\n", addr, want)
			return nil, fmt.Errorf("refusing to dial %q: only %s is allowed", addr, want)
		}
		return d.DialContext(ctx, network, addr)
	}, nil
}

// logger writes franz-go's log (info and above) to stderr and counts the
// lines that say a fetch session was reset or could not be used.
type logger struct {
	mu            sync.Mutex
	sessionResets atomic.Int64
}

func (l *logger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l *logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	// the fetch-session lines of franz-go's source.go (a session not
	// found, a bad epoch, topic-id trouble, an unexpected top-level error)
	for _, s := range []string{"SessionIDNotFound", "resetting fetch session", "resetting session"} {
		if strings.Contains(msg, s) {
			l.sessionResets.Add(1)
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(os.Stderr, "%s [%s] %s", time.Now().Format("15:04:05.000"), level, msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(os.Stderr, " %v=%v", keyvals[i], keyvals[i+1])
	}
	fmt.Fprintln(os.Stderr)
}

// fetchCounter counts Fetch requests (key 1) that were answered.
type fetchCounter struct{ n atomic.Int64 }

func (f *fetchCounter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == 1 && e2e.Err() == nil {
		f.n.Add(1)
	}
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q", name)
}

// clientOpts are the options every client of the driver starts from: the
// bootstrap, dialed through loopbackDialer only, a client id and the
// logger. A bootstrap that is not a loopback address ends the run (exit 2).
func clientOpts(bootstrap, clientID string, log *logger) []kgo.Opt {
	dial, err := loopbackDialer(bootstrap)
	if err != nil {
		fail(2, "%v", err)
	}
	return []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.Dialer(dial),
		kgo.ClientID(clientID),
		kgo.WithLogger(log),
	}
}

func produce(req produceRequest) int {
	timeout := timeoutOf(req.TimeoutMs)
	watchdog(timeout)
	opts := append(clientOpts(req.Bootstrap, "moldau-e2e-franz-producer", &logger{}),
		kgo.DefaultProduceTopic(req.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), // the default, stated
		// No RecordDeliveryTimeout: franz-go measures it from each record's
		// Timestamp (sink.go isTimedOut), and the test records carry
		// timestamps a day old, so every record would time out at once.
		// The context given to Produce and Flush bounds the run instead.
	)
	if req.Compression != "" { // else franz-go's default: snappy
		c, err := codec(req.Compression)
		if err != nil {
			fail(2, "%v", err)
		}
		opts = append(opts, kgo.ProducerBatchCompression(c))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(2, "new client: %v", err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	results := make([]produceResult, len(req.Records))
	var wg sync.WaitGroup
	for i, r := range req.Records {
		kr := &kgo.Record{
			Partition: r.Partition,
			Key:       []byte(r.Key),
			Value:     []byte(r.Value),
			Timestamp: time.UnixMilli(r.Timestamp),
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
		wg.Add(1)
		cl.Produce(ctx, kr, func(kr *kgo.Record, err error) {
			defer wg.Done()
			res := produceResult{Partition: kr.Partition, Offset: kr.Offset, ProducerID: kr.ProducerID, ProducerEpoch: kr.ProducerEpoch}
			if err != nil {
				s := err.Error()
				res.Error = &s
				res.Offset = -1
			}
			results[i] = res
		})
	}
	flushErr := cl.Flush(ctx)
	wg.Wait() // every promise has run once Flush returns or ctx ends the records
	answer := map[string]any{"results": results, "error": nil}
	code := 0
	if flushErr != nil {
		answer["error"] = "flush: " + flushErr.Error()
		code = 1
	}
	for _, r := range results {
		if r.Error != nil {
			code = 1
		}
	}
	emit(answer)
	return code
}

func consume(req consumeRequest) int {
	timeout := timeoutOf(req.TimeoutMs)
	watchdog(timeout)
	log := &logger{}
	fetches := &fetchCounter{}
	opts := append(clientOpts(req.Bootstrap, "moldau-e2e-franz-consumer", log),
		kgo.WithHooks(fetches),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if req.FetchMaxBytes > 0 {
		opts = append(opts, kgo.FetchMaxBytes(req.FetchMaxBytes))
	}
	if req.FetchMaxPartitionBytes > 0 {
		opts = append(opts, kgo.FetchMaxPartitionBytes(req.FetchMaxPartitionBytes))
	}
	if req.Group != "" {
		opts = append(opts,
			kgo.ConsumerGroup(req.Group),
			kgo.ConsumeTopics(req.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
		)
	} else {
		if req.Partitions <= 0 {
			fail(2, "consume: without a group, partitions must be given")
		}
		parts := make(map[int32]kgo.Offset, req.Partitions)
		for p := int32(0); p < req.Partitions; p++ {
			parts[p] = kgo.NewOffset().At(0)
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{req.Topic: parts}))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(2, "new client: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]record, 0, req.Count)
	errs := []string{}
	for len(out) < req.Count && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
				continue
			}
			errs = append(errs, fmt.Sprintf("%s[%d]: %v", e.Topic, e.Partition, e.Err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := record{
				Partition:  r.Partition,
				Offset:     r.Offset,
				Key:        r.Key,
				Value:      r.Value,
				Timestamp:  r.Timestamp.UnixMilli(),
				ProducerID: r.ProducerID,
			}
			if r.Attrs.TimestampType() == 1 {
				rec.TimestampType = "LogAppendTime"
			} else {
				rec.TimestampType = "CreateTime"
			}
			rec.Headers = make([]header, 0, len(r.Headers))
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, header{Key: h.Key, Value: h.Value})
			}
			out = append(out, rec)
		})
	}
	read := len(out)

	// leave the group (bounded), then close
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 10*time.Second)
	if req.Group != "" {
		if err := cl.LeaveGroupContext(closeCtx); err != nil {
			fmt.Fprintln(os.Stderr, "franz: leaving the group:", err)
		}
	}
	closeCancel()
	cl.Close()

	answer := map[string]any{
		"records":        out,
		"fetch_requests": fetches.n.Load(),
		"session_resets": log.sessionResets.Load(),
		"errors":         errs,
		"error":          nil,
	}
	code := 0
	if read < req.Count {
		answer["error"] = fmt.Sprintf("%d of %d records within %v", read, req.Count, timeout)
		code = 3
	}
	emit(answer)
	return code
}

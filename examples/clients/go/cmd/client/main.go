// Command client talks to an ares mesh with nothing but Kafka and the schema documents: it
// starts an agent, assigns it a task, reads the agent's events back and verifies their hash
// chain. It is the Go version of the client examples (examples/clients/*); see README.md.
//
// Libraries: github.com/twmb/franz-go (kgo) for Kafka, github.com/hamba/avro/v2 for Avro.
//
// Configuration (environment): ARES_KAFKA_BOOTSTRAP, ARES_COMMANDS_TOPIC, ARES_REPLIES_TOPIC,
// ARES_EVENTS_TOPIC, ARES_REPLIES_PARTITIONS, ARES_SCHEMA_DOCS_DIR, ARES_AGENT_ID.
//
// Output: one JSON line on stdout and exit status 0; on failure one line on stderr naming
// the step that failed, and exit status 1.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/soe"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	commandSchema = "ares.v1.Command"
	replySchema   = "ares.v1.Reply"
	eventSchema   = "ares.v1.Event"
	issuer        = "go-client-example"
)

// avroAPI writes maps and arrays as "count, items" blocks, as the Java and Python writers
// do; hamba's default ("-count, byte size, items") is valid Avro too, but the event hash
// is over exact bytes, so we write what the mesh writes.
var avroAPI = avro.Config{DisableBlockSizeHeader: true}.Freeze()

func main() {
	report, err := run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "go client:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(report)
	fmt.Println(string(line))
}

// Report is the one line printed on success.
type Report struct {
	AgentID        string   `json:"agent_id"`
	Client         string   `json:"client"`
	StartStatus    string   `json:"start_status"`
	AssignStatus   string   `json:"assign_status"`
	Events         int      `json:"events"`
	Versions       []int64  `json:"versions"`
	Types          []string `json:"types"`
	LastHash       string   `json:"last_hash"`
	Chain          string   `json:"chain"`
	ReplyPartition int32    `json:"reply_partition"`
}

func run(ctx context.Context) (*Report, error) {
	env, err := readEnv()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}

	// 1. The schemas, each with its fingerprint.
	schemas, err := loadSchemas(env.docsDir)
	if err != nil {
		return nil, fmt.Errorf("loading the schema documents of %s: %w", env.docsDir, err)
	}

	// The producer: kgo's defaults are what we want. It is idempotent, and its partitioner
	// (StickyKeyPartitioner) puts a keyed record where Java's would (murmur2 of the key),
	// so the command lands on the owner's partition. Had it not, the mesh forwards it.
	producer, err := kgo.NewClient(kgo.SeedBrokers(env.bootstrap))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer producer.Close()

	// 2. Our reply partition, chosen at random; its end offset is taken BEFORE anything is
	// sent, and the consumer starts there: a reply cannot be missed, and old ones are not
	// read. No consumer group: the partition is assigned directly.
	replyPartition := rand.Int32N(env.replyPartitions)
	ends, err := kadm.NewClient(producer).ListEndOffsets(ctx, env.repliesTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offset of %s: %w", env.repliesTopic, err)
	}
	end, ok := ends.Lookup(env.repliesTopic, replyPartition)
	if !ok {
		return nil, fmt.Errorf("end offset of %s: no partition %d", env.repliesTopic, replyPartition)
	}
	replies, err := kgo.NewClient(
		kgo.SeedBrokers(env.bootstrap),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			env.repliesTopic: {replyPartition: kgo.NewOffset().At(end.Offset)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, fmt.Errorf("replies consumer: %w", err)
	}
	defer replies.Close()

	// reply_to is the decimal number of our partition of the replies topic.
	replyTo := strconv.Itoa(int(replyPartition))

	// 3-4. agent.start, and its reply.
	start := newCommand(env.agentID, "agent.start", replyTo,
		"ares.v1.command.StartAgent", StartAgent{Kind: "example.pipeline", ConfigJSON: "{}"})
	startStatus, err := request(ctx, producer, replies, schemas, env.commandsTopic, start)
	if err != nil {
		return nil, fmt.Errorf("agent.start: %w", err)
	}

	// 5. task.assign, and its reply. The input is canonical JSON: sorted keys, no spaces.
	assign := newCommand(env.agentID, "task.assign", replyTo, "ares.v1.command.AssignTask",
		AssignTask{TaskID: "t-1", InputJSON: `{"email":false,"step_ms":10,"steps":2}`})
	assignStatus, err := request(ctx, producer, replies, schemas, env.commandsTopic, assign)
	if err != nil {
		return nil, fmt.Errorf("task.assign: %w", err)
	}

	// 6. The agent's events, until the task is completed.
	events, err := readEvents(ctx, env, schemas)
	if err != nil {
		return nil, fmt.Errorf("reading the events of %s: %w", env.agentID, err)
	}

	// 7. The hash chain.
	if err := verifyChain(events); err != nil {
		return nil, fmt.Errorf("hash chain of %s: %w", env.agentID, err)
	}

	report := &Report{
		AgentID: env.agentID, Client: "go/franz-go+hamba-avro",
		StartStatus: startStatus, AssignStatus: assignStatus, Events: len(events),
		Chain: "verified", ReplyPartition: replyPartition,
	}
	for _, e := range events {
		report.Versions = append(report.Versions, e.version)
		report.Types = append(report.Types, e.eventType)
	}
	report.LastHash = events[len(events)-1].hash
	return report, nil
}

// -- configuration ----------------------------------------------------------------------------

type environment struct {
	bootstrap, commandsTopic, repliesTopic, eventsTopic, docsDir, agentID string
	replyPartitions                                                       int32
}

func readEnv() (environment, error) {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	env := environment{
		bootstrap:     get("ARES_KAFKA_BOOTSTRAP"),
		commandsTopic: get("ARES_COMMANDS_TOPIC"),
		repliesTopic:  get("ARES_REPLIES_TOPIC"),
		eventsTopic:   get("ARES_EVENTS_TOPIC"),
		docsDir:       get("ARES_SCHEMA_DOCS_DIR"),
		agentID:       get("ARES_AGENT_ID"),
	}
	partitions := get("ARES_REPLIES_PARTITIONS")
	if len(missing) > 0 {
		return env, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	n, err := strconv.Atoi(partitions)
	if err != nil || n <= 0 {
		return env, fmt.Errorf("ARES_REPLIES_PARTITIONS=%q is not a positive integer", partitions)
	}
	env.replyPartitions = int32(n)
	return env, nil
}

// -- schemas and the single-object encoding --------------------------------------------------

// Every record on the mesh's topics is in Avro's single-object encoding: C3 01, the 8-byte
// fingerprint of the writer's schema, then the Avro binary body.
//
// WHERE THE FINGERPRINT COMES FROM. The specification's fingerprint is the CRC-64-AVRO of
// the schema's Parsing Canonical Form, which drops every attribute but name, type, fields,
// symbols, items, values and size: {"type":"long","logicalType":"timestamp-micros"} becomes
// "long". hamba/avro's canonical form (Schema.String()) keeps the logicalType, so for our
// schemas (all have timestamps) Schema.Fingerprint() and soe.NewCodec compute fingerprints
// that no reader following the specification (Java, fastavro) knows. (hamba's
// FingerprintUsing(avro.CRC64Avro) also returns the bytes big-endian; the header is
// little-endian: avro.CRC64AvroLE, still over hamba's own canonical form.)
//
// So we take each fingerprint from the exported schema documents (`ares schemas export
// --format avsc`): each is the .avsc plus an "x-ares" attribute whose "fingerprint" is the
// hex of the 8 header bytes exactly as they appear after C3 01. hamba parses the documents
// as schemas (it keeps "x-ares" as a property and otherwise ignores it). We only use hamba's
// soe package for the framing (BuildHeaderForFingerprint, ParseHeader).

// schemaDoc is one exported document: a schema, its name, version and header fingerprint.
type schemaDoc struct {
	name, version string
	fingerprint   [8]byte
	schema        *avro.RecordSchema
}

// schemaSet holds every version of every schema: by fingerprint (to read any record, written
// with the current schema or a released one) and the current one by name (to write).
type schemaSet struct {
	byFingerprint map[[8]byte]*schemaDoc
	current       map[string]*schemaDoc
}

func loadSchemas(dir string) (*schemaSet, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.avsc"))
	if err != nil {
		return nil, err
	}
	set := &schemaSet{byFingerprint: map[[8]byte]*schemaDoc{}, current: map[string]*schemaDoc{}}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Ares struct {
				Name, Version, Fingerprint string
			} `json:"x-ares"`
		}
		if err := json.Unmarshal(text, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fingerprint, err := hex.DecodeString(doc.Ares.Fingerprint)
		if err != nil || len(fingerprint) != 8 {
			return nil, fmt.Errorf("%s: x-ares.fingerprint %q is not 8 bytes of hex (is it "+
				"a document of `ares schemas export --format avsc`?)", path, doc.Ares.Fingerprint)
		}
		// One cache per document: the current and the released Event are both named
		// ares.v1.Event, and hamba's default cache would keep one of them for both.
		parsed, err := avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		record, ok := parsed.(*avro.RecordSchema)
		if !ok {
			return nil, fmt.Errorf("%s: not a record schema", path)
		}
		sd := &schemaDoc{name: doc.Ares.Name, version: doc.Ares.Version,
			fingerprint: [8]byte(fingerprint), schema: record}
		set.byFingerprint[sd.fingerprint] = sd
		if sd.version == "current" {
			set.current[sd.name] = sd
		}
	}
	for _, name := range []string{commandSchema, replySchema, eventSchema} {
		if set.current[name] == nil {
			return nil, fmt.Errorf("no current %s document", name)
		}
	}
	return set, nil
}

// encode writes v with the current schema `name`, in the single-object encoding.
func (s *schemaSet) encode(name string, v any) ([]byte, error) {
	doc := s.current[name]
	header, err := soe.BuildHeaderForFingerprint(doc.fingerprint[:])
	if err != nil {
		return nil, err
	}
	body, err := avroAPI.Marshal(doc.schema, v)
	if err != nil {
		return nil, err
	}
	return append(header, body...), nil
}

// decode reads a single-object encoded record of schema `name` into v, with the writer's
// schema that its fingerprint names. It returns that schema, and the body.
func (s *schemaSet) decode(data []byte, name string, v any) (*schemaDoc, []byte, error) {
	fingerprint, body, err := soe.ParseHeader(data) // checks the magic C3 01
	if err != nil {
		return nil, nil, err
	}
	doc := s.byFingerprint[[8]byte(fingerprint)]
	if doc == nil {
		return nil, nil, fmt.Errorf("unknown schema fingerprint %x", fingerprint)
	}
	if doc.name != name {
		return nil, nil, fmt.Errorf("expected a %s, got a %s", name, doc.name)
	}
	return doc, body, avroAPI.Unmarshal(doc.schema, body, v)
}

// -- commands and replies ----------------------------------------------------------------------

// Command is ares.v1.Command. The payload is a union of records: hamba writes a union from
// a map with one entry, the branch's full name to its value.
type Command struct {
	ID        string            `avro:"id"`
	StreamID  string            `avro:"stream_id"`
	Type      string            `avro:"type"`
	Issuer    string            `avro:"issuer"`
	Timestamp time.Time         `avro:"timestamp"` // timestamp-micros
	Payload   map[string]any    `avro:"payload"`
	ReplyTo   *string           `avro:"reply_to"` // ["null","string"]
	Metadata  map[string]string `avro:"metadata"`
}

// StartAgent is the payload of agent.start (ares.v1.command.StartAgent).
type StartAgent struct {
	Kind       string `avro:"kind"`
	ConfigJSON string `avro:"config_json"`
}

// AssignTask is the payload of task.assign (ares.v1.command.AssignTask).
type AssignTask struct {
	TaskID    string `avro:"task_id"`
	InputJSON string `avro:"input_json"`
}

// Reply is ares.v1.Reply.
type Reply struct {
	CorrelationID   string    `avro:"correlation_id"`
	Status          string    `avro:"status"`
	StreamID        string    `avro:"stream_id"`
	StreamVersion   int64     `avro:"stream_version"`
	ExpectedVersion *int64    `avro:"expected_version"`
	ActualVersion   *int64    `avro:"actual_version"`
	Message         string    `avro:"message"`
	Timestamp       time.Time `avro:"timestamp"`
}

func newCommand(agentID, commandType, replyTo, payloadRecord string, payload any) Command {
	return Command{
		ID: uuid.NewString(), StreamID: agentID, Type: commandType, Issuer: issuer,
		Timestamp: time.Now().UTC(),
		Payload:   map[string]any{payloadRecord: payload},
		ReplyTo:   &replyTo,
		Metadata:  map[string]string{},
	}
}

// request sends cmd (key = the agent id) and waits up to 60 s for the reply whose
// correlation_id is its id; the reply's status must be "ok".
func request(ctx context.Context, producer, replies *kgo.Client, schemas *schemaSet,
	topic string, cmd Command) (string, error) {
	value, err := schemas.encode(commandSchema, cmd)
	if err != nil {
		return "", fmt.Errorf("encoding the command: %w", err)
	}
	record := &kgo.Record{Topic: topic, Key: []byte(cmd.StreamID), Value: value}
	if err := producer.ProduceSync(ctx, record).FirstErr(); err != nil {
		return "", fmt.Errorf("producing the command: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		fetches := replies.PollFetches(ctx)
		if ctx.Err() != nil {
			return "", fmt.Errorf("no reply to command %s within 60 s", cmd.ID)
		}
		if err := fetchError(fetches); err != nil {
			return "", fmt.Errorf("reading replies: %w", err)
		}
		for _, r := range fetches.Records() {
			var reply Reply
			if _, _, err := schemas.decode(r.Value, replySchema, &reply); err != nil {
				return "", fmt.Errorf("decoding a reply at offset %d: %w", r.Offset, err)
			}
			if reply.CorrelationID != cmd.ID {
				continue // another client's reply on the same partition
			}
			if reply.Status != "ok" {
				return "", fmt.Errorf("status %q: %s", reply.Status, reply.Message)
			}
			return reply.Status, nil
		}
	}
}

func fetchError(fetches kgo.Fetches) error {
	var errs []error
	for _, e := range fetches.Errors() {
		errs = append(errs, fmt.Errorf("%s[%d]: %w", e.Topic, e.Partition, e.Err))
	}
	return errors.Join(errs...)
}

// -- events and the hash chain -----------------------------------------------------------------

// event is one decoded ares.v1.Event. It is decoded into a generic record (map[string]any)
// rather than a struct: the hash covers every field of the writer's schema, and a struct
// would drop the fields it does not know (of a newer release, say).
type event struct {
	writer    *schemaDoc
	record    map[string]any
	version   int64
	eventType string
	prevHash  string
	hash      string
}

// readEvents reads the events topic, all partitions from the beginning, only committed
// records, keeping the agent's, until a task.completed (up to 90 s).
func readEvents(ctx context.Context, env environment, schemas *schemaSet) ([]event, error) {
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(env.bootstrap),
		// Without a consumer group, ConsumeTopics assigns every partition of the topic.
		kgo.ConsumeTopics(env.eventsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Events are appended in transactions: never read an aborted or open one.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var events []event
	for {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no task.completed within 90 s (%d events read)", len(events))
		}
		if err := fetchError(fetches); err != nil {
			return nil, err
		}
		completed := false
		for _, r := range fetches.Records() {
			if string(r.Key) != env.agentID {
				continue
			}
			var record map[string]any
			writer, _, err := schemas.decode(r.Value, eventSchema, &record)
			if err != nil {
				return nil, fmt.Errorf("decoding the event at %s[%d]@%d: %w",
					r.Topic, r.Partition, r.Offset, err)
			}
			e := event{writer: writer, record: record}
			e.version, _ = record["version"].(int64)
			e.eventType, _ = record["type"].(string)
			e.prevHash, _ = record["prev_hash"].(string)
			e.hash, _ = record["hash"].(string)
			events = append(events, e)
			completed = completed || e.eventType == "task.completed"
		}
		if completed {
			return events, nil
		}
	}
}

// verifyChain checks the rule of docs/architecture.md ("The log is the truth"): versions
// 1, 2, 3, ...; prev_hash is the previous event's hash (64 zeros for version 1); hash is
// the SHA-256 of the event's Avro body re-encoded with hash = "" and metadata sorted by key.
func verifyChain(events []event) error {
	prev := strings.Repeat("0", 64)
	for i, e := range events {
		if e.version != int64(i+1) {
			return fmt.Errorf("event %d has version %d, expected %d", i, e.version, i+1)
		}
		if e.prevHash != prev {
			return fmt.Errorf("version %d: prev_hash %s, expected %s", e.version, e.prevHash, prev)
		}
		computed, err := chainHash(e)
		if err != nil {
			return fmt.Errorf("version %d: re-encoding: %w", e.version, err)
		}
		if computed != e.hash {
			return fmt.Errorf("version %d: hash %s, computed %s", e.version, e.hash, computed)
		}
		prev = e.hash
	}
	return nil
}

// chainHash re-encodes the event with its writer's schema, hash = "" (signature and key_id
// null), and returns the lowercase hex SHA-256 of that Avro body.
func chainHash(e event) (string, error) {
	record := maps.Clone(e.record)
	record["hash"] = ""
	// The fields after hash (a writer schema of release v1 has none) are what it does not
	// cover: the writer's signature of it.
	for _, name := range []string{"signature", "key_id"} {
		if _, ok := record[name]; ok {
			record[name] = nil
		}
	}
	var body bytes.Buffer
	w := avro.NewWriter(&body, 1024, avro.WithWriterConfig(avroAPI))
	writeSorted(w, e.writer.schema, record)
	if err := w.Flush(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(body.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// writeSorted writes v like w.WriteVal(schema, v), except that maps are written as one
// block, keys sorted: a Go map has no order, and the chain's rule sorts the metadata. (The
// rule says nothing of a map inside a payload, AlertRaised.details: the mesh keeps the
// order its appender gave, which a Go map cannot reproduce unless it was sorted. The
// runtime appends no such event: its alerts go to the ares.alerts topic.)
func writeSorted(w *avro.Writer, schema avro.Schema, v any) {
	switch s := schema.(type) {
	case *avro.RecordSchema:
		record, _ := v.(map[string]any)
		for _, f := range s.Fields() {
			writeSorted(w, f.Type(), record[f.Name()])
		}
	case *avro.MapSchema:
		m, _ := v.(map[string]any)
		if len(m) > 0 {
			w.WriteLong(int64(len(m)))
			for _, k := range slices.Sorted(maps.Keys(m)) {
				w.WriteString(k)
				writeSorted(w, s.Values(), m[k])
			}
		}
		w.WriteLong(0)
	case *avro.UnionSchema:
		// A generic union of records decodes as {"<branch full name>": value}; write the
		// branch index, then the value with the branch's schema.
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			for name, value := range m {
				if branch, index := s.Types().Get(name); branch != nil {
					w.WriteInt(int32(index))
					writeSorted(w, branch, value)
					return
				}
			}
		}
		if v == nil {
			if _, index := s.Types().Get("null"); index >= 0 {
				w.WriteInt(int32(index))
			} else {
				w.Error = fmt.Errorf("nil for a union without null: %s", s)
			}
			return
		}
		w.WriteVal(s, v) // ["null", "string"] and the like: hamba picks the branch by type
	default:
		w.WriteVal(schema, v)
	}
}

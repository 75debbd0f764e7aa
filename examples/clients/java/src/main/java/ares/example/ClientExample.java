package ares.example;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;
import java.util.stream.Collectors;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.util.Utf8;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Starts an ares agent, gives it a task and verifies the hash chain of its events, talking to
 * the mesh only through Kafka and the .avsc files: no ares code, no schema registry.
 *
 * <p>Every record on the wire is Avro's single-object encoding ({@code C3 01}, the 8-byte
 * little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then
 * the Avro binary body): exactly what {@link BinaryMessageEncoder} writes and
 * {@link BinaryMessageDecoder} reads.
 *
 * <p>Configuration comes from the environment (see README.md). Prints one JSON line on stdout
 * and exits 0; on failure prints one line on stderr naming the step that failed and exits 1.
 */
public final class ClientExample {

    private static final String CLIENT = "java/kafka-clients+avro";
    private static final String ISSUER = "java-client-example";
    private static final String COMMAND = "ares.v1.Command";
    private static final String REPLY = "ares.v1.Reply";
    private static final String EVENT = "ares.v1.Event";
    private static final String ZERO_HASH = "0".repeat(64);

    /** The step under way, named in the failure message. */
    private static String step = "config";

    /** A failure of one step: its message is the one line printed on stderr. */
    static final class StepFailed extends Exception {
        StepFailed(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        // kafka-clients logs through SLF4J (slf4j-simple): warnings and errors only, on stderr.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        try {
            System.out.println(run());
            System.exit(0);
        } catch (StepFailed e) {
            System.err.println("java client example failed: " + e.getMessage());
        } catch (Exception e) {
            System.err.println("java client example failed: " + step + ": " + e);
        }
        System.exit(1);
    }

    static String run() throws Exception {
        String bootstrap = env("ARES_KAFKA_BOOTSTRAP");
        String commandsTopic = env("ARES_COMMANDS_TOPIC");
        String repliesTopic = env("ARES_REPLIES_TOPIC");
        String eventsTopic = env("ARES_EVENTS_TOPIC");
        int replyPartitions = Integer.parseInt(env("ARES_REPLIES_PARTITIONS"));
        Path schemasDir = Path.of(env("ARES_SCHEMAS_DIR"));
        String agentId = env("ARES_AGENT_ID");

        // 1. The schemas: the current ones, plus every released one, so that records written
        //    by an older release decode too (resolved into the current schema).
        step = "schemas";
        Schema commandSchema = parse(schemasDir.resolve(COMMAND + ".avsc"));
        Schema replySchema = parse(schemasDir.resolve(REPLY + ".avsc"));
        Schema eventSchema = parse(schemasDir.resolve(EVENT + ".avsc"));
        String docsDir = System.getenv("ARES_SCHEMA_DOCS_DIR");
        if (docsDir != null && !docsDir.isEmpty()) {
            checkFingerprints(Path.of(docsDir), Map.of(
                    COMMAND, commandSchema, REPLY, replySchema, EVENT, eventSchema));
        }
        BinaryMessageEncoder<GenericRecord> commandEncoder =
                new BinaryMessageEncoder<>(GenericData.get(), commandSchema);
        BinaryMessageDecoder<GenericRecord> replyDecoder =
                new BinaryMessageDecoder<>(GenericData.get(), replySchema);
        BinaryMessageDecoder<GenericRecord> eventDecoder =
                new BinaryMessageDecoder<>(GenericData.get(), eventSchema);
        for (Schema released : releasedSchemas(schemasDir, EVENT)) {
            eventDecoder.addSchema(released);
        }
        for (Schema released : releasedSchemas(schemasDir, REPLY)) {
            replyDecoder.addSchema(released);
        }

        // 2. Our reply partition, chosen at random; its position is pinned at the END before
        //    anything is sent, so no reply can be missed. seekToEnd is lazy: position()
        //    makes the consumer look the offset up now.
        step = "replies";
        int replyPartition = ThreadLocalRandom.current().nextInt(replyPartitions);
        TopicPartition replies = new TopicPartition(repliesTopic, replyPartition);
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(producerConfig(bootstrap));
             KafkaConsumer<String, byte[]> replyConsumer = new KafkaConsumer<>(consumerConfig(bootstrap))) {
            if (replyConsumer.partitionsFor(repliesTopic).size() <= replyPartition) {
                throw new StepFailed("replies: topic " + repliesTopic + " has no partition " + replyPartition);
            }
            replyConsumer.assign(List.of(replies));
            replyConsumer.seekToEnd(List.of(replies));
            replyConsumer.position(replies);

            // 3-4. agent.start, then its Reply.
            step = "agent.start";
            GenericRecord start = new GenericRecordBuilder(branch(commandSchema, "ares.v1.command.StartAgent"))
                    .set("kind", "example.pipeline")
                    .set("config_json", "{}")
                    .build();
            String startStatus = send(producer, replyConsumer, replyDecoder, commandEncoder,
                    commandsTopic, command(commandSchema, agentId, "agent.start", start, replyPartition));

            // 5. task.assign (input: canonical JSON, sorted keys, no whitespace), then its Reply.
            step = "task.assign";
            GenericRecord assign = new GenericRecordBuilder(branch(commandSchema, "ares.v1.command.AssignTask"))
                    .set("task_id", "t-1")
                    .set("input_json", "{\"email\":false,\"step_ms\":10,\"steps\":2}")
                    .build();
            String assignStatus = send(producer, replyConsumer, replyDecoder, commandEncoder,
                    commandsTopic, command(commandSchema, agentId, "task.assign", assign, replyPartition));

            // 6. The agent's events, up to task.completed.
            step = "events";
            List<GenericRecord> events = readEvents(bootstrap, eventsTopic, eventDecoder, agentId);

            // 7. The hash chain.
            step = "chain";
            verifyChain(events);

            // 8. The report.
            List<String> versions = new ArrayList<>();
            List<String> types = new ArrayList<>();
            for (GenericRecord event : events) {
                versions.add(event.get("version").toString());
                types.add(quote(event.get("type").toString()));
            }
            return "{\"agent_id\":" + quote(agentId)
                    + ",\"client\":" + quote(CLIENT)
                    + ",\"start_status\":" + quote(startStatus)
                    + ",\"assign_status\":" + quote(assignStatus)
                    + ",\"events\":" + events.size()
                    + ",\"versions\":[" + String.join(",", versions) + "]"
                    + ",\"types\":[" + String.join(",", types) + "]"
                    + ",\"last_hash\":" + quote(events.get(events.size() - 1).get("hash").toString())
                    + ",\"chain\":\"verified\""
                    + ",\"reply_partition\":" + replyPartition + "}";
        }
    }

    // -- commands and replies ----------------------------------------------------------------

    /** A Command record; reply_to is the decimal number of our partition of the replies topic. */
    static GenericRecord command(Schema schema, String agentId, String type, GenericRecord payload,
                                 int replyPartition) {
        return new GenericRecordBuilder(schema)
                .set("id", UUID.randomUUID().toString())
                .set("stream_id", agentId)
                .set("type", type)
                .set("issuer", ISSUER)
                .set("timestamp", ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now())) // timestamp-micros
                .set("payload", payload)
                .set("reply_to", Integer.toString(replyPartition))
                .set("metadata", Map.of())
                .build();
    }

    /**
     * Produces {@code command} (key = agent id: the default partitioner hashes it with murmur2;
     * a command that lands on another partition than its stream's is forwarded by the owner)
     * and waits up to 60 s for the Reply whose correlation_id is the command's id.
     * Returns the Reply's status, which must be "ok".
     */
    static String send(KafkaProducer<String, byte[]> producer, KafkaConsumer<String, byte[]> replyConsumer,
                       BinaryMessageDecoder<GenericRecord> replyDecoder,
                       BinaryMessageEncoder<GenericRecord> commandEncoder,
                       String topic, GenericRecord command) throws Exception {
        String id = command.get("id").toString();
        String type = command.get("type").toString();
        byte[] value = toBytes(commandEncoder.encode(command));
        producer.send(new ProducerRecord<>(topic, command.get("stream_id").toString(), value)).get();

        Instant deadline = Instant.now().plusSeconds(60);
        while (Instant.now().isBefore(deadline)) {
            for (ConsumerRecord<String, byte[]> record : replyConsumer.poll(Duration.ofMillis(500))) {
                GenericRecord reply = replyDecoder.decode(record.value());
                if (!id.equals(reply.get("correlation_id").toString())) {
                    continue; // another client's reply on the same partition
                }
                String status = reply.get("status").toString();
                if (!"ok".equals(status)) {
                    throw new StepFailed(type + ": reply status " + status + ": " + reply.get("message"));
                }
                return status;
            }
        }
        throw new StepFailed(type + ": no reply within 60 s (command id " + id + ")");
    }

    // -- events ------------------------------------------------------------------------------

    /**
     * Reads every partition of the events topic from the beginning (read_committed: only
     * events of committed transactions) and keeps the agent's own (key = agent id) until a
     * task.completed event. A stream lives on one partition, so its events come in order.
     */
    static List<GenericRecord> readEvents(String bootstrap, String topic,
                                          BinaryMessageDecoder<GenericRecord> decoder,
                                          String agentId) throws Exception {
        List<GenericRecord> events = new ArrayList<>();
        try (KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(consumerConfig(bootstrap))) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition()))
                    .collect(Collectors.toList());
            if (partitions.isEmpty()) {
                throw new StepFailed("events: topic " + topic + " does not exist");
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Instant deadline = Instant.now().plusSeconds(90);
            while (Instant.now().isBefore(deadline)) {
                for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    if (!agentId.equals(record.key())) {
                        continue;
                    }
                    // Checks the C3 01 magic, finds the writer schema by its fingerprint and
                    // decodes the body with it (resolved into the current Event schema).
                    GenericRecord event = decoder.decode(record.value());
                    events.add(event);
                    if ("task.completed".equals(event.get("type").toString())) {
                        return events;
                    }
                }
            }
        }
        throw new StepFailed("events: no task.completed within 90 s; read " + events.size()
                + " events of " + agentId);
    }

    /**
     * The documented chain rule: versions 1, 2, 3, ...; prev_hash is 64 zeros for version 1,
     * else the previous event's hash; hash is the SHA-256 (lowercase hex) of the Avro binary
     * body of the same record with hash = "" and metadata written with its keys sorted.
     *
     * <p>The records are in the current Event schema, which every event of this fresh agent
     * was written with. (An event written by an older release with a different Event schema
     * hashes with that schema: ares' verifier tries the current one, then the released ones.)
     */
    static void verifyChain(List<GenericRecord> events) throws Exception {
        String previous = ZERO_HASH;
        long expected = 1;
        for (GenericRecord event : events) {
            long version = (Long) event.get("version");
            if (version != expected) {
                throw new StepFailed("chain: expected version " + expected + ", got " + version);
            }
            if (!previous.equals(event.get("prev_hash").toString())) {
                throw new StepFailed("chain: version " + version + ": prev_hash is not the previous hash");
            }
            String hash = event.get("hash").toString();
            String recomputed = chainHash(event);
            if (!hash.equals(recomputed)) {
                throw new StepFailed("chain: version " + version + ": hash " + hash
                        + " but the record hashes to " + recomputed);
            }
            previous = hash;
            expected++;
        }
    }

    /** SHA-256 hex of the re-encoded record (hash = "", metadata in sorted key order). */
    @SuppressWarnings("unchecked")
    static String chainHash(GenericRecord event) throws IOException, NoSuchAlgorithmException {
        GenericData.Record canonical = new GenericData.Record((GenericData.Record) event, false);
        canonical.put("hash", "");
        // The fields after hash (a writer schema of release v1 has none) are what it does not
        // cover: the writer's signature of it.
        for (String name : new String[] {"signature", "key_id"}) {
            if (canonical.getSchema().getField(name) != null) {
                canonical.put(name, null);
            }
        }
        // Decoded map keys are Avro Utf8, which compare byte by byte: UTF-8 byte order is
        // code point order, the order the writer sorts in (String.compareTo, UTF-16, is not).
        // The GenericDatumWriter writes the TreeMap's entries in that order, as one block.
        canonical.put("metadata", new TreeMap<>((Map<Utf8, Object>) event.get("metadata")));

        ByteArrayOutputStream body = new ByteArrayOutputStream();
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(body, null);
        new GenericDatumWriter<GenericRecord>(canonical.getSchema()).write(canonical, encoder);
        encoder.flush();
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(body.toByteArray()));
    }

    // -- schemas -----------------------------------------------------------------------------

    static Schema parse(Path file) throws IOException {
        return new Schema.Parser().parse(file.toFile()); // one parser per file: names repeat
    }

    /** The schema {@code name} of every release, schemas/released/v1/, v2/, ... */
    static List<Schema> releasedSchemas(Path schemasDir, String name) throws IOException {
        List<Schema> found = new ArrayList<>();
        Path released = schemasDir.resolve("released");
        if (!Files.isDirectory(released)) {
            return found;
        }
        try (DirectoryStream<Path> versions = Files.newDirectoryStream(released, "v*")) {
            for (Path version : versions) {
                Path file = version.resolve(name + ".avsc");
                if (Files.isRegularFile(file)) {
                    found.add(parse(file));
                }
            }
        }
        return found;
    }

    /**
     * Avro computes the fingerprint itself (SchemaNormalization.parsingFingerprint64, what the
     * encoder writes in the header): check it agrees with the one ares publishes
     * (`ares schemas export`), and so does the Parsing Canonical Form it is computed from.
     */
    static void checkFingerprints(Path docsDir, Map<String, Schema> schemas) throws Exception {
        for (Map.Entry<String, Schema> entry : schemas.entrySet()) {
            Schema doc = parse(docsDir.resolve(entry.getKey() + ".current.avsc"));
            Map<?, ?> published = (Map<?, ?>) doc.getObjectProp("x-ares");
            long ours = SchemaNormalization.parsingFingerprint64(entry.getValue());
            long theirs = ((Number) published.get("fingerprint_int64")).longValue();
            if (ours != theirs
                    || !SchemaNormalization.toParsingForm(entry.getValue()).equals(published.get("canonical_form"))) {
                throw new StepFailed("schemas: " + entry.getKey() + ": Avro's fingerprint " + ours
                        + " or canonical form differs from the published one (" + theirs + ")");
            }
        }
    }

    /** The union branch of the Command payload named {@code fullName}. */
    static Schema branch(Schema commandSchema, String fullName) {
        Schema union = commandSchema.getField("payload").schema();
        return union.getTypes().get(union.getIndexNamed(fullName));
    }

    // -- Kafka -------------------------------------------------------------------------------

    static Properties producerConfig(String bootstrap) {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);   // UTF-8
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        return config;
    }

    /** assign/seek consumers: no group, no committed offsets. */
    static Properties consumerConfig(String bootstrap) {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        return config;
    }

    // -- small helpers -----------------------------------------------------------------------

    static String env(String name) throws StepFailed {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new StepFailed("config: " + name + " is not set");
        }
        return value;
    }

    static byte[] toBytes(java.nio.ByteBuffer buffer) {
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return bytes;
    }

    /** A JSON string literal. */
    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    private ClientExample() {
    }
}

package bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Word count as bench/run.py measures it: lines from the input topic, lower-cased, words as
 * Python's {@code re.findall(r"\w+", line.lower())}, repartitioned by word, counted in a
 * RocksDB store (the default), each count written as key = word, value = UTF-8 decimal.
 *
 * <p>Arguments: bootstrap input output application.id state.dir threads commit.interval.ms
 * [key=value ...]; each key=value is one more StreamsConfig property (the bench's tuning:
 * producer.compression.type, statestore.cache.max.bytes, ...), applied last, except the
 * program's own option {@code bench.preaggregate=true}: sum words per task before the
 * repartition ({@link PreAggregate}, punctuated at the commit interval) and add up the partial
 * sums after it, instead of repartitioning every word and counting it.
 *
 * <p>Prints {@code FIRST_RECORD <epoch ms>} when the first input record reaches the topology
 * and {@code STATE <state> <epoch ms>} on every state change; SIGTERM closes it cleanly.
 */
public final class WordCount {
  // Python's \w is Unicode-aware; Java's is ASCII-only unless asked.
  private static final Pattern WORD = Pattern.compile("\\w+", Pattern.UNICODE_CHARACTER_CLASS);

  // The program's own option among the key=value arguments (not a StreamsConfig property).
  static final String PREAGGREGATE = "bench.preaggregate";

  private WordCount() {}

  static List<String> words(String line) {
    List<String> out = new ArrayList<>();
    Matcher m = WORD.matcher(line.toLowerCase(Locale.ROOT));
    while (m.find()) {
      out.add(m.group());
    }
    return out;
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length < 7) {
      System.err.println(
          "usage: WordCount bootstrap input output application.id state.dir threads commit.ms"
              + " [key=value ...]");
      System.exit(2);
    }
    String input = args[1];
    String output = args[2];
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[5]));
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[6]));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    // One broker: internal topics (repartition, changelog) cannot have more replicas.
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    boolean preaggregate = false;
    for (int i = 7; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("not key=value: " + args[i]);
        System.exit(2);
      }
      String key = args[i].substring(0, eq);
      String value = args[i].substring(eq + 1);
      if (key.equals(PREAGGREGATE)) {
        preaggregate = Boolean.parseBoolean(value);
      } else {
        props.put(key, value);
      }
    }

    AtomicBoolean first = new AtomicBoolean(true);
    StreamsBuilder builder = new StreamsBuilder();
    KStream<byte[], String> lines =
        builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .peek(
                (k, v) -> {
                  if (first.get() && first.compareAndSet(true, false)) {
                    System.out.println("FIRST_RECORD " + System.currentTimeMillis());
                    System.out.flush();
                  }
                });
    KTable<String, Long> counts;
    if (preaggregate) {
      // The same repartition topic name ("words") and count store name as the plain topology.
      long interval = Long.parseLong(args[6]);
      counts =
          lines
              .process(new PreAggregate(Duration.ofMillis(interval)))
              .groupByKey(Grouped.with("words", Serdes.String(), Serdes.Long()))
              .reduce(
                  Long::sum,
                  Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                      .withKeySerde(Serdes.String())
                      .withValueSerde(Serdes.Long()));
    } else {
      counts =
          lines
              .flatMapValues(line -> line == null ? List.of() : words(line))
              .groupBy((k, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
              .count(Materialized.as("counts"));
    }
    counts
        .toStream()
        .mapValues(count -> Long.toString(count))
        .to(output, Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch closed = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          System.out.println("STATE " + now + " " + System.currentTimeMillis());
          System.out.flush();
        });
    streams.setUncaughtExceptionHandler(
        exc -> {
          System.err.println("uncaught: " + exc);
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  closed.countDown();
                }));
    streams.start();
    closed.await();
  }
}

package bench;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * The word count's combiner, before the repartition: lines in, (word, partial sum) out. Each
 * task sums its words in a state store and, at every wall-clock punctuation (the commit
 * interval), forwards each word's partial sum and deletes it from the store. Downstream, the
 * repartition by word and a reduce by addition turn the partial sums into exact counts.
 *
 * <p><b>Why the partial sums live in a logged store, not in a plain map.</b> Under {@code
 * exactly_once_v2} a commit puts, in one transaction, the task's input offsets, everything it
 * sent (repartition records) and its stores' changelog records. A partial sum held only in a
 * Java map is in none of the three: whenever a commit happens while the map holds sums of
 * records whose offsets the commit includes, those sums survive only in the JVM, and a crash (or
 * the task moving to another thread) loses them while their input is never read again. Such
 * commits do happen, whatever the punctuation interval, as the Kafka Streams source shows
 * (read in apache/kafka trunk for 4.0 and checked against the 4.4.0 jar's bytecode):
 *
 * <ul>
 *   <li>{@code StreamThread.runOnceWithoutProcessingThreads} runs, per iteration, {@code
 *       taskManager.process}, then {@code taskManager.punctuate}, then {@code maybeCommit}. A
 *       punctuation is due when the wall clock passes the punctuator's own schedule (set when
 *       the processor is initialized), a commit when {@code now - lastCommitMs >
 *       commit.interval.ms}: two independent clocks. With both at the same interval, the
 *       punctuation may run anywhere in the commit cycle, so records processed between the last
 *       punctuation and a commit are committed unforwarded.
 *   <li>{@code TaskManager.handleRevocation} (a rebalance) commits every task that needs it,
 *       kept or revoked, without any punctuation; a revoked task is then closed: its map would be
 *       dropped with no crash at all. A clean shutdown commits the same way on close.
 * </ul>
 *
 * <p>No punctuation schedule can therefore be guaranteed to run before every commit. Instead the
 * sums are task state: a key-value store with a changelog (logging, the default) and a record
 * cache. Every commit then includes the store's changes since the previous commit, in the same
 * transaction as the input offsets and the forwarded sums. At any commit, each input word
 * counted since the start is either still in the store (its partial sum committed in the
 * changelog) or was forwarded to the repartition topic by a punctuation whose delete of the same
 * sum is in the same transaction. After a crash the transaction in flight aborts, the store is
 * rebuilt from its committed changelog, and the input is read again from the committed offsets:
 * nothing is lost or counted twice. Punctuation timing only decides latency and how many partial
 * sums are sent, never correctness.
 *
 * <p>Cost: the record cache collapses a commit interval's updates of a word into one changelog
 * record at the commit's flush (a value, or a tombstone for a word forwarded and deleted), so
 * the changelog gets about one record per distinct word per commit interval per task, the same
 * order as the repartition records. The store is in memory: it holds at most about two
 * intervals' distinct words, and after a crash Kafka Streams restores it from the changelog
 * either way ({@code exactly_once_v2} wipes local state on an unclean shutdown).
 *
 * <p>Docs: Processor API, punctuation and state stores,
 * https://kafka.apache.org/44/streams/developer-guide/processor-api/ ; {@code KStream#process}
 * with {@code api.Processor} (KIP-820),
 * https://kafka.apache.org/44/streams/developer-guide/dsl-api/ ; record caches for Processor API
 * stores, https://kafka.apache.org/44/streams/developer-guide/memory-mgmt/ ; {@code
 * processing.guarantee} and {@code commit.interval.ms},
 * https://kafka.apache.org/44/streams/developer-guide/config-streams/ .
 */
final class PreAggregate implements ProcessorSupplier<byte[], String, String, Long> {
  static final String STORE = "partial-sums";

  private final Duration interval;

  PreAggregate(Duration interval) {
    this.interval = interval;
  }

  @Override
  public Set<StoreBuilder<?>> stores() {
    // Connected to the processor by KStream#process (ConnectedStoreProvider, KIP-401).
    return Set.of(
        Stores.keyValueStoreBuilder(
                Stores.inMemoryKeyValueStore(STORE), Serdes.String(), Serdes.Long())
            .withCachingEnabled()
            .withLoggingEnabled(Map.of()));
  }

  @Override
  public Processor<byte[], String, String, Long> get() {
    return new Summer(interval);
  }

  private static final class Summer implements Processor<byte[], String, String, Long> {
    private final Duration interval;
    private ProcessorContext<String, Long> context;
    private KeyValueStore<String, Long> partial;

    Summer(Duration interval) {
      this.interval = interval;
    }

    @Override
    public void init(ProcessorContext<String, Long> context) {
      this.context = context;
      this.partial = context.getStateStore(STORE);
      // Wall clock, not stream time: the last sums must go out when the input stops.
      context.schedule(interval, PunctuationType.WALL_CLOCK_TIME, this::forwardAll);
    }

    @Override
    public void process(Record<byte[], String> line) {
      if (line.value() == null) {
        return;
      }
      for (String word : WordCount.words(line.value())) {
        Long sum = partial.get(word);
        partial.put(word, sum == null ? 1L : sum + 1L);
      }
    }

    private void forwardAll(long now) {
      // Read first, then forward and delete: no store changes under an open iterator.
      List<KeyValue<String, Long>> sums = new ArrayList<>();
      try (KeyValueIterator<String, Long> all = partial.all()) {
        all.forEachRemaining(sums::add);
      }
      for (KeyValue<String, Long> sum : sums) {
        context.forward(new Record<>(sum.key, sum.value, now));
        partial.delete(sum.key);
      }
    }
  }
}

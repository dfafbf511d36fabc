package bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.function.Predicate;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A send rate that the caller changes while a producer runs, and what is owed at it: the pacing
 * of {@link LoadGen} (words/s) and {@link NexmarkReplay} (events/s).
 *
 * <p>The commands thread sets the rate and stops; the sending loop calls {@link #tick()} once
 * per round (a new rate starts owing nothing: no burst to catch up an old rate's debt), sends
 * while {@link #owed()} allows and {@link #sliceOver()} does not say stop, {@link #spend}s what
 * it sent, then {@link #endSlice} and {@link #report} once a second.
 */
final class Pacer {
  private static final long SLICE_NS = 20_000_000L; // read the rate at least every 20 ms

  private double rate; // set by the commands thread
  private boolean stopped;
  private double current;
  private double budget; // units owed at the current rate
  private double maxBehindMs;
  private long last = System.nanoTime();
  private long sliceStart = last;
  private long nextReport = System.currentTimeMillis() + 1000;

  synchronized void setRate(double unitsPerSecond) {
    rate = unitsPerSecond;
  }

  synchronized void stop() {
    stopped = true;
  }

  /**
   * Starts the daemon thread that reads standard input: {@code RATE <units/s>} and {@code STOP}
   * here, any other line to {@code other}, which returns true to stop reading. At the end of the
   * input (the caller went away) the pacer stops and {@code atEnd} runs.
   */
  void listen(Predicate<String> other, Runnable atEnd) {
    Thread commands =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  String[] parts = line.trim().split("\\s+");
                  if (parts[0].equals("RATE") && parts.length == 2) {
                    setRate(Double.parseDouble(parts[1]));
                  } else if (parts[0].equals("STOP")) {
                    stop();
                  } else if (other.test(line.trim())) {
                    return;
                  }
                }
              } catch (IOException e) {
                // The caller went away: stop.
              }
              stop();
              atEnd.run();
            },
            "commands");
    commands.setDaemon(true);
    commands.start();
  }

  /** Starts a round: reads the rate and adds what is owed since the last round. */
  boolean tick() {
    double want;
    synchronized (this) {
      if (stopped) {
        return false;
      }
      want = rate;
    }
    long now = System.nanoTime();
    if (want != current) {
      current = want;
      budget = 0;
      maxBehindMs = 0;
    } else {
      budget += current * (now - last) / 1e9;
    }
    last = now;
    sliceStart = now;
    return true;
  }

  double owed() {
    return budget;
  }

  void spend(double units) {
    budget -= units;
  }

  boolean sliceOver() {
    return System.nanoTime() - sliceStart > SLICE_NS;
  }

  /** Ends a round's sends: how far the sends lag the rate, when they were meant to keep up. */
  void endSlice(boolean pacing) {
    if (current > 0 && pacing) {
      maxBehindMs = Math.max(maxBehindMs, 1000 * budget / current);
    }
  }

  /**
   * Once a second, {@code "SENT <epoch ms> <counts> <behind ms> <rate>"} with the caller's
   * counts in between, and the lag measured anew; {@code null} until then.
   */
  String report(String counts) {
    long wall = System.currentTimeMillis();
    if (wall < nextReport) {
      return null;
    }
    nextReport += 1000;
    String line =
        "SENT " + wall + " " + counts + " " + Math.round(maxBehindMs) + " " + Math.round(current);
    maxBehindMs = 0;
    return line;
  }

  /**
   * The bench's live producers' settings: idempotent and acks=all (the defaults), compressed
   * and batched like its other producers, what a producer that keeps up at a few hundred
   * thousand records/s looks like. Idempotence keeps each partition's records in send order.
   */
  static Properties producerProps(String bootstrap) {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
    props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    props.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
    props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, 128L * 1024 * 1024);
    return props;
  }
}

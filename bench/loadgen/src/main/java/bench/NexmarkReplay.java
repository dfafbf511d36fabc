package bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The Nexmark crate's events replayed live from a file (the lines of {@code nexmark --no-wait
 * --number N}, generated once by bench/nexmark_live.py), in order, at a rate in events per
 * second that the caller changes while it runs: the live input of the Nexmark capacity and
 * latency phases (bench/nexmark_replay.py drives it).
 *
 * <p>Arguments: bootstrap topic partitions block events-file ack-file. Line i of the file goes
 * to partition (i / block) % partitions: blocks of consecutive lines round robin, as
 * `processor nexmark generate` loads them, so that each partition holds its lines in the
 * file's order, which is event-time order. No key.
 *
 * <p>Standard input takes commands: {@code RATE <events/s>} (0 pauses); {@code STOP} ends the
 * replay of the file, waits until every line sent is acknowledged and prints {@code STOPPED
 * <lines>}; then {@code CLOSE <line>} sends that line (the closing event) to every partition,
 * waits for its acknowledgement, writes the ack file and prints {@code DONE <lines> <closing>
 * <errors>}. Every second it prints {@code SENT <epoch ms> <lines acknowledged> <lines sent>
 * <behind ms> <rate>}; once the file is exhausted, {@code END <lines>}.
 *
 * <p>The ack file: per partition, the wall time (epoch ms) at which its records were
 * acknowledged by the broker, as change points {@code <partition> <offset> <ms>}: every
 * record from that offset on was acknowledged at that millisecond, up to the next point. The
 * topic is new and written only by this producer, so a record's offset is its place in its
 * partition.
 */
public final class NexmarkReplay {
  private NexmarkReplay() {}

  /** Change points (offset, ms) of one partition's acknowledgements, in callback order. */
  static final class Acks {
    private long[] offsets = new long[1024];
    private long[] millis = new long[1024];
    private int size;
    private long lastOffset = -2;
    private long lastMs = -1;

    synchronized void add(long offset, long ms) {
      if (ms != lastMs || offset != lastOffset + 1) {
        if (size == offsets.length) {
          offsets = Arrays.copyOf(offsets, size * 2);
          millis = Arrays.copyOf(millis, size * 2);
        }
        offsets[size] = offset;
        millis[size] = ms;
        size++;
      }
      lastOffset = offset;
      lastMs = ms;
    }

    synchronized void write(int partition, PrintWriter out) {
      for (int i = 0; i < size; i++) {
        out.println(partition + " " + offsets[i] + " " + millis[i]);
      }
    }
  }

  public static void main(String[] args) throws IOException, InterruptedException {
    if (args.length != 6) {
      System.err.println(
          "usage: NexmarkReplay bootstrap topic partitions block events-file ack-file");
      System.exit(2);
    }
    String topic = args[1];
    int partitions = Integer.parseInt(args[2]);
    int block = Integer.parseInt(args[3]);
    Path events = Path.of(args[4]);

    AtomicLong acked = new AtomicLong();
    AtomicLong errors = new AtomicLong();
    Acks[] acks = new Acks[partitions];
    for (int p = 0; p < partitions; p++) {
      acks[p] = new Acks();
    }
    BlockingQueue<String> closing = new ArrayBlockingQueue<>(1);
    Pacer pacer = new Pacer();
    pacer.listen(
        line -> line.startsWith("CLOSE ") && closing.offer(line.substring(6)),
        () -> closing.offer(""));

    long sent = 0;
    long closingSent = 0;
    // Idempotence (Pacer.producerProps) keeps each partition's records in the order sent, so
    // offsets follow the file.
    try (KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(Pacer.producerProps(args[0]));
        BufferedReader file = Files.newBufferedReader(events, StandardCharsets.UTF_8)) {
      boolean exhausted = false;
      while (pacer.tick()) {
        while (pacer.owed() >= 1 && !exhausted) {
          String line = file.readLine();
          if (line == null) {
            exhausted = true;
            System.out.println("END " + sent);
            System.out.flush();
            break;
          }
          if (line.isEmpty()) {
            continue;
          }
          int partition = (int) ((sent / block) % partitions);
          sent++;
          pacer.spend(1);
          send(producer, topic, partition, line, acks, acked, errors);
          if (pacer.sliceOver()) {
            break;
          }
        }
        pacer.endSlice(!exhausted);
        String report = pacer.report(acked.get() + " " + sent);
        if (report != null) {
          System.out.println(report);
          System.out.flush();
        }
        LockSupport.parkNanos(1_000_000L);
      }
      producer.flush();
      System.out.println("STOPPED " + sent);
      System.out.flush();
      String close = closing.take();
      if (!close.isEmpty()) {
        for (int p = 0; p < partitions; p++) {
          send(producer, topic, p, close, acks, acked, errors);
          closingSent++;
        }
        producer.flush();
      }
    }
    try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[5])))) {
      for (int p = 0; p < partitions; p++) {
        acks[p].write(p, out);
      }
    }
    System.out.println("DONE " + sent + " " + closingSent + " " + errors.get());
    System.out.flush();
  }

  private static void send(
      KafkaProducer<byte[], byte[]> producer,
      String topic,
      int partition,
      String line,
      Acks[] acks,
      AtomicLong acked,
      AtomicLong errors) {
    producer.send(
        new ProducerRecord<>(topic, partition, null, line.getBytes(StandardCharsets.UTF_8)),
        (meta, exc) -> {
          if (exc != null) {
            errors.incrementAndGet();
          } else {
            acks[meta.partition()].add(meta.offset(), System.currentTimeMillis());
            acked.incrementAndGet();
          }
        });
  }
}

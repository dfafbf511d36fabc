package bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Lines of a pool file into a topic at a rate in words per second that the caller changes while
 * it runs: the bench's live input (bench/loadgen.py).
 *
 * <p>Arguments: bootstrap topic partitions pool-file seed counts-file. Line k of the whole run
 * goes into partition k % partitions; which pool line it is comes from a seeded random
 * generator, and at the end the counts file has, per pool line used, how often it was sent
 * ("index count" lines), from which the caller knows the exact expected word counts.
 *
 * <p>Standard input takes commands: {@code RATE <words/s>} (0 pauses) and {@code STOP}. Every
 * second it prints {@code SENT <epoch ms> <words acknowledged> <records acknowledged>
 * <behind ms> <rate>}: behind is how far the sends lag the rate (the producer's own limit).
 * Ends with {@code DONE <records> <words> <errors>}.
 */
public final class LoadGen {
  private static final Pattern WORD = Pattern.compile("\\w+", Pattern.UNICODE_CHARACTER_CLASS);

  private LoadGen() {}

  static int words(String line) {
    int n = 0;
    Matcher m = WORD.matcher(line.toLowerCase(Locale.ROOT));
    while (m.find()) {
      n++;
    }
    return n;
  }

  public static void main(String[] args) throws IOException, InterruptedException {
    if (args.length != 6) {
      System.err.println("usage: LoadGen bootstrap topic partitions pool-file seed counts-file");
      System.exit(2);
    }
    String topic = args[1];
    int partitions = Integer.parseInt(args[2]);
    List<String> pool = Files.readAllLines(Path.of(args[3]), StandardCharsets.UTF_8);
    byte[][] values = new byte[pool.size()][];
    int[] sizes = new int[pool.size()];
    for (int i = 0; i < pool.size(); i++) {
      values[i] = pool.get(i).getBytes(StandardCharsets.UTF_8);
      sizes[i] = words(pool.get(i));
    }
    SplittableRandom random = new SplittableRandom(Long.parseLong(args[4]));
    long[] sent = new long[pool.size()];

    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    // Idempotent and acks=all (the defaults), compressed and batched like the bench's other
    // producers: what a producer that keeps up at a few hundred thousand lines/s looks like.
    props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
    props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    props.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
    props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, 128L * 1024 * 1024);

    AtomicLong ackedRecords = new AtomicLong();
    AtomicLong ackedWords = new AtomicLong();
    AtomicLong errors = new AtomicLong();
    double[] rate = {0.0};
    boolean[] stop = {false};
    Thread commands =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  String[] parts = line.trim().split("\\s+");
                  synchronized (rate) {
                    if (parts[0].equals("RATE") && parts.length == 2) {
                      rate[0] = Double.parseDouble(parts[1]);
                    } else if (parts[0].equals("STOP")) {
                      stop[0] = true;
                      return;
                    }
                  }
                }
              } catch (IOException e) {
                // The caller went away: stop.
              }
              synchronized (rate) {
                stop[0] = true;
              }
            },
            "commands");
    commands.setDaemon(true);
    commands.start();

    long records = 0;
    long words = 0;
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      double budget = 0; // words owed at the current rate
      double current = 0;
      long last = System.nanoTime();
      long nextReport = System.currentTimeMillis() + 1000;
      double maxBehindMs = 0;
      while (true) {
        double want;
        synchronized (rate) {
          if (stop[0]) {
            break;
          }
          want = rate[0];
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
        while (budget > 0) {
          int k = random.nextInt(values.length);
          int size = sizes[k];
          sent[k]++;
          records++;
          words += size;
          budget -= size;
          producer.send(
              new ProducerRecord<>(topic, (int) ((records - 1) % partitions), null, values[k]),
              (meta, exc) -> {
                if (exc != null) {
                  errors.incrementAndGet();
                } else {
                  ackedRecords.incrementAndGet();
                  ackedWords.addAndGet(size);
                }
              });
          if (System.nanoTime() - now > 20_000_000L) {
            break; // report and read the rate at least every 20 ms
          }
        }
        if (current > 0) {
          maxBehindMs = Math.max(maxBehindMs, 1000 * budget / current);
        }
        long wall = System.currentTimeMillis();
        if (wall >= nextReport) {
          nextReport += 1000;
          System.out.println(
              "SENT " + wall + " " + ackedWords.get() + " " + ackedRecords.get() + " "
                  + Math.round(maxBehindMs) + " " + Math.round(current));
          System.out.flush();
          maxBehindMs = 0;
        }
        LockSupport.parkNanos(1_000_000L);
      }
      producer.flush();
    }
    try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[5])))) {
      for (int k = 0; k < sent.length; k++) {
        if (sent[k] > 0) {
          out.println(k + " " + sent[k]);
        }
      }
    }
    System.out.println("DONE " + records + " " + words + " " + errors.get());
    System.out.flush();
  }
}

package bench;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

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

    AtomicLong ackedRecords = new AtomicLong();
    AtomicLong ackedWords = new AtomicLong();
    AtomicLong errors = new AtomicLong();
    Pacer pacer = new Pacer();
    pacer.listen(line -> false, () -> {});

    long records = 0;
    long words = 0;
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(Pacer.producerProps(args[0]))) {
      while (pacer.tick()) {
        while (pacer.owed() > 0) {
          int k = random.nextInt(values.length);
          int size = sizes[k];
          sent[k]++;
          records++;
          words += size;
          pacer.spend(size);
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
          if (pacer.sliceOver()) {
            break;
          }
        }
        pacer.endSlice(true);
        String report = pacer.report(ackedWords.get() + " " + ackedRecords.get());
        if (report != null) {
          System.out.println(report);
          System.out.flush();
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

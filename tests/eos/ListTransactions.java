// Every transaction the cluster knows, one per line: transactional id, producer id, state.
// Run as a single-file source program on the cached Kafka jars (kafka-clients' Admin API:
// the cache has no kafka-tools jar, whose TransactionsCommand does the same). Used by
// verify.py to find transactions left open.
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionListing;

public class ListTransactions {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(props)) {
            for (TransactionListing t : admin.listTransactions().all().get()) {
                System.out.println(t.transactionalId() + "\t" + t.producerId() + "\t" + t.state());
            }
        }
    }
}

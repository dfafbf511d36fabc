-- q6, average selling price by seller over its last 10 closed auctions. Nexmark's form (an
-- OVER window on the updating final prices) does not run in Flink SQL; the same result as a
-- Top-N: the final prices (as q4), per seller the 10 with the latest expires (ties by the
-- higher auction id, as the engine's order), averaged; updating (upsert-kafka, key = seller).
CREATE TABLE sink (
  seller BIGINT, avg_price DOUBLE, PRIMARY KEY (seller) NOT ENFORCED
) WITH (${upsert_sink});

INSERT INTO sink
SELECT seller, AVG(CAST(final AS DOUBLE)) AS avg_price
FROM (
  SELECT seller, final,
    ROW_NUMBER() OVER (PARTITION BY seller ORDER BY expires DESC, id DESC) AS rownum
  FROM (
    SELECT MAX(B.price) AS final, A.id, A.seller, A.expires
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
    GROUP BY A.id, A.seller, A.expires
  )
)
WHERE rownum <= 10
GROUP BY seller;

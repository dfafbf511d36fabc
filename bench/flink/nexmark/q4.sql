-- q4, average price per category: an auction's final price is its highest bid with date_time
-- in [date_time, expires] (a regular join, no time bound: no bid is late); the average over
-- the auctions that have one, updated as prices change (an updating stream: upsert-kafka,
-- key = category). AVG over DOUBLE: Flink's AVG of a BIGINT is a BIGINT.
CREATE TABLE sink (
  category BIGINT, avg_price DOUBLE, PRIMARY KEY (category) NOT ENFORCED
) WITH (${upsert_sink});

INSERT INTO sink
SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS avg_price
FROM (
  SELECT MAX(B.price) AS final, A.category
  FROM auction AS A, bid AS B
  WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
  GROUP BY A.id, A.category
) AS Q
GROUP BY Q.category;

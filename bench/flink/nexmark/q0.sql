-- q0, pass-through: every bid, all its fields (as examples/nexmark/q0.py).
CREATE TABLE sink (
  auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time BIGINT,
  extra STRING
) WITH (${append_sink});

INSERT INTO sink
SELECT auction, bidder, price, channel, url, date_time, extra FROM bid;

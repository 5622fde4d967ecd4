package matrix;

/** The POJO state. */
public class Article {
    public String name;
    public long count;
    public double score;

    public Article() {}

    static Article of(String key, long n) {
        Article item = new Article();
        item.name = key;
        item.count = n;
        item.score = n / 2.0;
        return item;
    }

    String toJson() {
        return "{\"name\":" + MatrixJob.Json.str(name) + ",\"count\":" + count + ",\"score\":" + score + "}";
    }
}

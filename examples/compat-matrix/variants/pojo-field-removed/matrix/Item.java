package matrix;

/** The POJO state. */
public class Item {
    public String name;
    public long count;

    public Item() {}

    static Item of(String key, long n) {
        Item item = new Item();
        item.name = key;
        item.count = n;
        return item;
    }

    String toJson() {
        return "{\"name\":" + MatrixJob.Json.str(name) + ",\"count\":" + count + "}";
    }
}

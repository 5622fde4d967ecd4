package opstate;

/** Version 3 of the tally POJO: v1's fields and a new {@code label} (null in every tally restored from v1). */
public class Tally {
    public String name;
    public long count;
    public String label;

    public Tally() {}

    static Tally named(String name) {
        Tally tally = new Tally();
        tally.name = name;
        return tally;
    }

    void increment() {
        count++;
    }

    String describe() {
        return name + "=" + count + (label == null ? "" : " label=" + label);
    }
}

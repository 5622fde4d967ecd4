package opstate;

/** Version 1 of the tally POJO: {@code count} is a long. */
public class Tally {
    public String name;
    public long count;

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
        return name + "=" + count;
    }
}

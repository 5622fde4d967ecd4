package opstate;

/** Version 2 of the tally POJO: {@code count} became a String (Flink cannot restore v1's state into it). */
public class Tally {
    public String name;
    public String count = "0";

    public Tally() {}

    static Tally named(String name) {
        Tally tally = new Tally();
        tally.name = name;
        return tally;
    }

    void increment() {
        count = String.valueOf(Long.parseLong(count) + 1);
    }

    String describe() {
        return name + "=" + count;
    }
}

package matrix;

/** The enum state: the color of a count is {@code values()[n % values().length]}. */
public enum Color {
    RED, GREEN, BLUE, YELLOW;

    static Color of(long n) {
        return values()[(int) (n % values().length)];
    }
}

package edge;

/** A {@link Shape} subclass, itself a POJO. */
public class Square extends Shape {
    public long side;

    public Square() {}

    @Override
    String extraJson() {
        return ",\"side\":" + side;
    }
}

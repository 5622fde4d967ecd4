package edge;

/** A {@link Shape} subclass, itself a POJO. */
public class Circle extends Shape {
    public double radius;

    public Circle() {}

    @Override
    String extraJson() {
        return ",\"radius\":" + radius;
    }
}
